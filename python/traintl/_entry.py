"""The Python half of the entry shim (libtraintl_python.so).

The shim starts the interpreter inside traintl-worker, puts working_dir and this package
on sys.path, enters working_dir, attaches traintl._native to the worker, and calls run().
run() imports the job's module, sets up torch.distributed when the module uses torch (as
Ray's TorchTrainer does before it calls train_loop_per_worker), calls the function with
train_loop_config, and says how it went. Not for users.
"""

import contextlib
import importlib
import inspect
import os
import sys
import traceback

from traintl.train import _session

# traintl/abi.h's entry-point codes.
ENTRY_OK = 0
ENTRY_FAILED = 1
ENTRY_INCOMPATIBLE = 2

# Lines of a traceback quoted in an import failure's message (the whole traceback is in the
# rank's log).
_TRACEBACK_TAIL_LINES = 12


def _describe(exc):
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_IMPORTLIB_DIR = os.path.dirname(importlib.__file__)


def _is_plumbing(filename):
    """True for a frame of this module or of the import machinery: not the user's code."""
    return (filename == __file__ or filename.startswith("<frozen importlib")
            or os.path.dirname(filename) == _IMPORTLIB_DIR)


def _log_traceback():
    """Prints the exception being handled to stderr (the rank's log), without the frames of
    traintl and importlib, and returns the text."""
    exc = sys.exc_info()[1]
    try:
        te = traceback.TracebackException.from_exception(exc)
        te.stack = traceback.StackSummary.from_list(
            [f for f in te.stack if not _is_plumbing(f.filename)])
        text = "".join(te.format())
    except Exception:
        text = traceback.format_exc()
    sys.stderr.write(text)
    return text


def _tail(text, lines=_TRACEBACK_TAIL_LINES):
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def _exit_outcome(exc):
    code = exc.code
    if code is None or code == 0:
        return ENTRY_OK, "", False
    if not isinstance(code, int):
        sys.stderr.write(f"{code}\n")  # as the interpreter prints sys.exit("message")
    return ENTRY_FAILED, f"the training function called sys.exit({code!r})", False


def _is_missing(exc, module_name):
    """True when `exc` says that `module_name` itself (or a package above it) does not
    exist, as opposed to a failing import inside it."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return False
    return module_name == exc.name or module_name.startswith(exc.name + ".")


def _import(module_name, working_dir):
    """(module, None) or (None, outcome)."""
    where = f"(working_dir {working_dir})" if working_dir else "(no working_dir)"
    try:
        return importlib.import_module(module_name), None
    except (ImportError, SyntaxError) as exc:
        text = _log_traceback()
        message = f"cannot import module {module_name!r} {where}: {_describe(exc)}"
        if not _is_missing(exc, module_name):
            message += "\n" + _tail(text)
        return None, (ENTRY_INCOMPATIBLE, message, False)
    except SystemExit as exc:
        return None, _exit_outcome(exc)
    except BaseException:
        # Code at the module's top level failed: perhaps a transient failure, so retryable.
        text = _log_traceback()
        return None, (ENTRY_FAILED,
                      f"importing module {module_name!r} failed:\n{text.rstrip()}", True)


def _lookup(module, module_name, function_name):
    """(function, None) or (None, outcome); function_name may be dotted (Class.method)."""
    target = module
    for part in function_name.split("."):
        if not hasattr(target, part):
            where = getattr(module, "__file__", None)
            suffix = f" ({where})" if where else ""
            return None, (ENTRY_INCOMPATIBLE,
                          f"module {module_name!r} has no function {function_name!r}{suffix}",
                          False)
        target = getattr(target, part)
    if not callable(target):
        return None, (ENTRY_INCOMPATIBLE,
                      f"module {module_name!r}: {function_name!r} is not callable "
                      f"(it is a {type(target).__name__})", False)
    return target, None


def _takes_config(fn, name):
    """True to call fn(config), False for fn(); or an error message. Ray Train allows both
    and nothing else."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True  # a builtin or extension callable: give it the config
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in params if p.default is inspect.Parameter.empty
                and p.kind in positional + (inspect.Parameter.KEYWORD_ONLY,)]
    if len(required) > 1 or any(p.kind == inspect.Parameter.KEYWORD_ONLY for p in required):
        return (f"function {name!r} must take 0 or 1 arguments (train_loop_config); its "
                f"signature is {inspect.signature(fn)}")
    return any(p.kind in positional + (inspect.Parameter.VAR_POSITIONAL,) for p in params)


@contextlib.contextmanager
def _xgboost_collective():
    """Joins the attempt's rabit tracker around the function, as Ray's XGBoostTrainer does,
    when the job runs with "framework": "xgboost" and the module imported xgboost; the
    communicator reads the DMLC_* environment the daemon set."""
    if "xgboost" not in sys.modules or not os.environ.get("DMLC_TRACKER_URI"):
        yield
        return
    import xgboost.collective

    with xgboost.collective.CommunicatorContext():
        yield


def run(module_name, function_name, working_dir):
    """Runs module_name:function_name; returns (code, message, keep_end): an ENTRY_* code,
    the failure's message ("" on success), and whether the message's end is what matters
    when it must be shortened (a traceback's)."""
    try:
        module, outcome = _import(module_name, working_dir)
        if outcome is not None:
            return outcome
        fn, outcome = _lookup(module, module_name, function_name)
        if outcome is not None:
            return outcome
        takes_config = _takes_config(fn, function_name)
        if isinstance(takes_config, str):
            return ENTRY_INCOMPATIBLE, f"module {module_name!r}: {takes_config}", False
        config = _session.config()
        if "torch" in sys.modules:
            try:
                from traintl.train import torch as train_torch

                train_torch._ensure_process_group()
            except BaseException:
                text = _log_traceback()
                return (ENTRY_FAILED,
                        f"setting up torch.distributed failed:\n{text.rstrip()}", True)
        try:
            with _xgboost_collective():
                if takes_config:
                    fn(config)
                else:
                    fn()
        except SystemExit as exc:
            return _exit_outcome(exc)
        except BaseException:
            return ENTRY_FAILED, _log_traceback().rstrip(), True
        return ENTRY_OK, "", False
    except BaseException:
        # traintl's own failure (the user's code is guarded above).
        return ENTRY_FAILED, "traintl: " + _log_traceback().rstrip(), True
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
