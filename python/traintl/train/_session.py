"""The running rank's session: its host (traintl._native) and its context.

Internal to traintl.train. The context is read once: it does not change while the process
runs.
"""

import json
import threading

from traintl import _native

_lock = threading.Lock()
_context = None


def native():
    """The bindings over the worker's C ABI."""
    return _native


def context():
    """The rank's context (docs/WORKER_PROTOCOL.md) as a dict.

    Raises RuntimeError outside a traintl job.
    """
    global _context
    with _lock:
        if _context is None:
            _context = json.loads(_native.context_json())
        return _context


def config():
    """train_loop_config, as the job spec gives it (an empty dict when it has none)."""
    value = context().get("config")
    return value if isinstance(value, dict) else {}
