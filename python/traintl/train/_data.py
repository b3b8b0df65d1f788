"""DataIterator: this rank's shard of a job-spec dataset.

Mirrors ray.data.DataIterator as ray.train.get_dataset_shard() returns it. The worker reads
the files (CSV, JSON Lines, .npy, Parquet; local or http) on background threads and hands
over batches of columns; numeric columns arrive as numpy arrays viewing the worker's
memory (no copy), string columns as numpy object arrays of str.
"""

import json
import threading

from traintl.train import _session

# Host dtype names (traintl/abi.h) by torch dtype name, for parsing a column straight into
# the tensor's dtype.
_HOST_DTYPES = {
    "torch.float64": "float64",
    "torch.float32": "float32",
    "torch.int64": "int64",
    "torch.int32": "int32",
}


class DataIterator:
    """One rank's shard of a dataset of the job spec.

    Each iter_batches() / iter_torch_batches() call streams one epoch; the epochs are
    counted, and the count seeds the local shuffle, so every epoch is shuffled differently
    (and alike on a restarted attempt that calls set_epoch()). With "split" (the default
    for "train") every rank reads a disjoint, row-balanced part of the dataset.

    Thread-safety: an iterator from iter_batches() is used by one thread at a time;
    DataIterator itself may be shared.
    """

    def __init__(self, name, shard):
        self._name = name
        self._shard = shard
        self._lock = threading.Lock()
        self._epoch = 0

    @property
    def name(self):
        return self._name

    def __repr__(self):
        return f"DataIterator(dataset={self._name!r})"

    def info(self):
        """The shard as the worker describes it: "files", "columns" ([{"name", "dtype",
        "shape"}]), "total_rows", "num_rows" (None until counted), ..."""
        return json.loads(self._shard.info())

    def columns(self):
        """The names of the shard's columns."""
        return [c["name"] for c in self.info().get("columns", [])]

    def set_epoch(self, epoch):
        """The epoch the next iter_batches() call shuffles for (each call moves it on by
        one). Set it when resuming to repeat the interrupted run's shuffles."""
        with self._lock:
            self._epoch = int(epoch)

    def _next_epoch(self):
        with self._lock:
            epoch = self._epoch
            self._epoch += 1
            return epoch

    def count(self):
        """Rows this rank reads per epoch. Known without reading when the worker counted
        them (split datasets); otherwise counted by streaming the shard once."""
        num_rows = self.info().get("num_rows")
        if isinstance(num_rows, int):
            return num_rows
        first = self.columns()[:1]
        options = {"batch_size": 65536, "columns": first, "epoch": self._epoch}
        it = self._shard.iter(json.dumps(options))
        total = 0
        try:
            for batch in it:
                total += len(next(iter(batch.values()))) if batch else 0
        finally:
            it.close()
        return total

    def _open(self, batch_size, drop_last, local_shuffle_buffer_size,
              local_shuffle_seed, prefetch_batches, columns, column_types=None):
        if batch_size is None:
            raise ValueError("batch_size=None (whole blocks) is not supported; pass a size")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        options = {
            "batch_size": batch_size,
            "drop_last": bool(drop_last),
            "epoch": self._next_epoch(),
            # The worker always prepares at least one batch ahead.
            "prefetch_batches": max(1, int(prefetch_batches or 0)),
        }
        if local_shuffle_buffer_size is not None:
            if local_shuffle_buffer_size < 1:
                raise ValueError("local_shuffle_buffer_size must be >= 1")
            options["shuffle"] = True
            options["shuffle_buffer_rows"] = int(local_shuffle_buffer_size)
            options["seed"] = int(local_shuffle_seed or 0)
        if columns is not None:
            options["columns"] = list(columns)
        if column_types:
            options["column_types"] = column_types
        return self._shard.iter(json.dumps(options))

    def iter_batches(self, *, prefetch_batches=1, batch_size=256, batch_format="numpy",
                     drop_last=False, local_shuffle_buffer_size=None,
                     local_shuffle_seed=None, columns=None):
        """One epoch of the shard in batches of `batch_size` rows.

        batch_format "numpy", "dict" or "default": dict[str, numpy.ndarray] (numeric
        arrays view the worker's memory); "pandas": a pandas.DataFrame. The last batch is
        smaller unless drop_last. local_shuffle_buffer_size: shuffle rows through a buffer
        of this many rows, seeded by local_shuffle_seed (default 0) and the epoch.
        columns (traintl's addition): read only these columns, in this order.
        Raises ValueError for bad data or options, OSError for I/O failures.
        """
        if batch_format not in ("numpy", "dict", "default", "pandas"):
            raise ValueError(
                f"batch_format must be 'numpy', 'dict', 'default' or 'pandas', "
                f"got {batch_format!r}")
        it = self._open(batch_size, drop_last, local_shuffle_buffer_size,
                        local_shuffle_seed, prefetch_batches, columns)
        if batch_format == "pandas":
            import pandas

            return _Batches(it, pandas.DataFrame)
        return _Batches(it, None)

    def iter_torch_batches(self, *, prefetch_batches=1, batch_size=256, dtypes=None,
                           device=None, collate_fn=None, drop_last=False,
                           local_shuffle_buffer_size=None, local_shuffle_seed=None,
                           columns=None):
        """One epoch of the shard as dict[str, torch.Tensor].

        dtypes: a torch dtype for every column, or {column: dtype}; a column that keeps its
        dtype on the CPU shares the worker's memory (torch.from_numpy), and float64,
        float32, int64 and int32 are parsed straight into the requested type. device:
        where the tensors go; default train.torch.get_device(). collate_fn: turns the numpy
        batch into what the loop uses instead (its tensors are moved to `device`).
        A string column raises ValueError (select numeric ones with `columns`).
        """
        import torch

        from traintl.train import torch as train_torch

        if collate_fn is not None and dtypes is not None:
            raise ValueError("pass either collate_fn or dtypes, not both")
        if device is None:
            device = train_torch.get_device()
        device = torch.device(device)
        column_types = None
        if dtypes is not None:
            column_types = self._host_column_types(dtypes, columns)
        it = self._open(batch_size, drop_last, local_shuffle_buffer_size,
                        local_shuffle_seed, prefetch_batches, columns, column_types)
        if collate_fn is not None:
            def convert(batch):
                return train_torch._move_to_device(collate_fn(batch), device)
        else:
            def convert(batch):
                return _to_tensors(batch, dtypes, device)
        return _Batches(it, convert)

    def _host_column_types(self, dtypes, columns):
        """The worker-side parse types matching `dtypes`, for numeric columns only."""
        numeric = {c["name"]: c["dtype"] for c in self.info().get("columns", [])
                   if c.get("dtype") != "string"}
        wanted = columns if columns is not None else list(numeric)
        out = {}
        for name in wanted:
            dtype = dtypes.get(name) if isinstance(dtypes, dict) else dtypes
            host = _HOST_DTYPES.get(str(dtype)) if dtype is not None else None
            if host is not None and name in numeric and numeric[name] != host:
                out[name] = host
        return out


def _to_tensors(batch, dtypes, device):
    import torch

    out = {}
    for name, array in batch.items():
        if array.dtype == object:
            raise ValueError(
                f"iter_torch_batches: column {name!r} holds strings and cannot be a tensor "
                f"(select numeric columns with columns=[...])")
        if isinstance(dtypes, dict):
            dtype = dtypes.get(name)
        else:
            dtype = dtypes
        tensor = torch.from_numpy(array)
        if dtype is not None and tensor.dtype != dtype:
            tensor = tensor.to(dtype)
        if tensor.device != device:
            tensor = tensor.to(device)
        out[name] = tensor
    if isinstance(dtypes, dict):
        unknown = sorted(set(dtypes) - set(batch))
        if unknown:
            raise ValueError(f"iter_torch_batches: dtypes names {unknown}, which the batch "
                             f"does not have (its columns: {list(batch)})")
    return out


class _Batches:
    """One epoch's batches: an iterator (and iterable) that stops the worker's background
    threads when exhausted or closed."""

    def __init__(self, native_iter, convert):
        self._it = native_iter
        self._convert = convert

    def __iter__(self):
        return self

    def __next__(self):
        if self._it is None:
            raise StopIteration
        batch = self._it.next()
        if batch is None:
            self.close()
            raise StopIteration
        return self._convert(batch) if self._convert is not None else batch

    def close(self):
        """Stops the epoch early."""
        if self._it is not None:
            self._it.close()
            self._it = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # The native iterator closes itself too; closing here stops the threads without
        # waiting for a garbage collection cycle.
        try:
            self.close()
        except Exception:
            pass


_shards = {}
_shards_lock = threading.Lock()


def get_dataset_shard(name):
    """This rank's shard of the dataset `name` of the job spec's "datasets". Mirrors
    ray.train.get_dataset_shard(). The same DataIterator is returned for a name every time,
    so its epoch count carries on.

    Raises ValueError when the spec has no such dataset or its files are bad, OSError for
    I/O failures.
    """
    with _shards_lock:
        shard = _shards.get(name)
        if shard is None:
            shard = DataIterator(name, _session.native().open_shard(name, ""))
            _shards[name] = shard
        return shard
