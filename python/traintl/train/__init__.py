"""traintl.train: the training-function API, with Ray Train's names (ray.train).

    from traintl import train

    def train_func(config):
        ctx = train.get_context()              # get_world_rank(), get_world_size(), ...
        start = 0
        if (ckpt := train.get_checkpoint()) is not None:
            with ckpt.as_directory() as d:
                start = load(d) + 1
        shard = train.get_dataset_shard("train")
        for epoch in range(start, config["epochs"]):
            for batch in shard.iter_batches(batch_size=64):
                ...
            train.report({"loss": loss, "epoch": epoch},
                         checkpoint=train.Checkpoint.from_directory(tmp))
            if train.should_stop():
                return

Mirrors: report -> ray.train.report, get_checkpoint -> ray.train.get_checkpoint,
Checkpoint -> ray.train.Checkpoint, get_context -> ray.train.get_context,
get_dataset_shard -> ray.train.get_dataset_shard; train.torch -> ray.train.torch.
should_stop() is traintl's: true once the job was asked to stop.

Every function works inside a traintl job only (a function run by a {"python": ...}
entry point, or a program started by a {"command": [...]} one); elsewhere it raises
RuntimeError. Every function may be called from any thread; report() calls are
serialized, each returning once the worker accepted its report.
"""

import json
import math
from collections.abc import Mapping

from traintl.train import _session
from traintl.train._checkpoint import Checkpoint
from traintl.train._context import TrainContext, get_context
from traintl.train._data import DataIterator, get_dataset_shard

__all__ = [
    "Checkpoint",
    "DataIterator",
    "TrainContext",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "report",
    "should_stop",
    "torch",
    "wait_for_reports",
]


def _json_value(value, where):
    """`value` as plain JSON data: numpy and torch scalars (and arrays) become Python
    numbers (lists); NaN and infinities become None, as C++'s nlohmann::json writes them
    (JSON has no NaN)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_value(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    # numpy scalars and arrays, torch tensors: tolist() gives Python numbers and lists.
    if hasattr(value, "dtype") and callable(getattr(value, "tolist", None)):
        return _json_value(value.tolist(), where)
    try:
        number = float(value)  # decimal.Decimal, fractions.Fraction, ...
    except (TypeError, ValueError):
        raise TypeError(
            f"train.report: metric {where} of type {type(value).__name__} is not "
            f"JSON serializable") from None
    return number if math.isfinite(number) else None


def report(metrics, checkpoint=None, async_upload=False):
    """Reports one round of metrics (a dict), optionally with a Checkpoint.

    Every rank calls report() the same number of times; rank 0's metrics become the job's.
    The checkpoint's files are copied into storage before this returns, so the directory
    may be deleted afterwards; the ranks' files are merged into one checkpoint. Blocks
    until the worker accepted the report. Mirrors ray.train.report().

    async_upload=True (default False): returns once the checkpoint's files are snapshotted
    (a copy-on-write clone where the file system can, else a copy into /dev/shm); the
    worker persists them and sends the report in the background, and the checkpoint is
    committed once every rank's files are durable, as always. The directory may be changed
    or deleted as soon as report() returns. Later reports keep their order: metrics alone
    still return at once; a report with a checkpoint first waits for this upload (at most
    one per rank is in flight). A failed upload raises RuntimeError from the next report()
    or wait_for_reports(); the end of the training function waits for the upload (after a
    stop at most 2 s). Without a checkpoint, async_upload changes nothing.

    Raises TypeError (metrics not a dict, or a value that is not a number, string, list or
    dict) and RuntimeError (the report was refused, e.g. a checkpoint directory that does
    not exist, or an earlier background upload failed).
    """
    if not isinstance(metrics, Mapping):
        raise TypeError(f"train.report: metrics must be a dict, not {type(metrics).__name__}")
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise TypeError(
            f"train.report: checkpoint must be a train.Checkpoint, not "
            f"{type(checkpoint).__name__}")
    text = json.dumps(_json_value(metrics, "metrics"), allow_nan=False)
    if async_upload and checkpoint is not None:
        _finish_uploads_at_exit()
        _session.native().report_async(text, checkpoint.path)
        return
    _session.native().report(text, checkpoint.path if checkpoint is not None else None)


def wait_for_reports():
    """Waits until every report so far was sent (background checkpoint uploads done).

    Raises RuntimeError with the error of a failed upload."""
    _session.native().wait_reports()


_exit_hook = []


def _finish_uploads_at_exit():
    """A {"command": [...]} program hosts its reports itself: at its exit, wait for the
    last upload (a {"python": ...} entry point's worker does so itself). A failed upload
    then fails the program (exit code 1)."""
    if _exit_hook or _session.native().is_attached_to_worker():
        return
    import atexit
    import os
    import sys

    def finish():
        try:
            _session.native().wait_reports()
        except RuntimeError as e:
            sys.stderr.write(f"traintl: {e}\n")
            sys.stderr.flush()
            os._exit(1)

    atexit.register(finish)
    _exit_hook.append(finish)


def get_checkpoint():
    """The checkpoint to resume from, or None: on a restarted attempt the latest committed
    checkpoint; on the first attempt the spec's resume_from_checkpoint, if any. Its
    directory is read-only. Mirrors ray.train.get_checkpoint()."""
    path = _session.native().get_checkpoint()
    return Checkpoint(path) if path is not None else None


def should_stop():
    """True once the job was asked to stop (traintl stop, or another rank failed): return
    from the training function soon."""
    return bool(_session.native().should_stop())


def __getattr__(name):
    # train.torch imports torch: only when asked for (PEP 562).
    if name == "torch":
        import importlib

        return importlib.import_module("traintl.train.torch")
    raise AttributeError(f"module 'traintl.train' has no attribute {name!r}")
