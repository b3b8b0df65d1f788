"""Shared by the asynchronous checkpoint tests (test_async_checkpoints.py,
test_async_checkpoint_faults.py): the job spec and the completeness check.

libtest_train.so with ckpt_manifest writes, into every rank's checkpoint files,
files_r<R>.json = {name: [size, crc32]} of that rank's other files, last. A committed
checkpoint is complete when every rank's manifest is there and every file it lists has
that size and CRC.
"""
import glob
import json
import os
import zlib

from harness import lib_path


def async_spec(storage, tmp, workers=2, epochs=4, ckpt_mb=2, max_failures=0, env=None, **config):
    cfg = {"epochs": epochs, "sleep_ms": 50, "ckpt_mb": ckpt_mb, "async_checkpoint": True,
           "ckpt_manifest": True, "tmp_dir": tmp}
    cfg.update(config)
    spec = {
        "name": "async-ckpt",
        "entrypoint": {"library": lib_path("libtest_train.so")},
        "train_loop_config": cfg,
        "scaling_config": {"num_workers": workers, "resources_per_worker": {"CPU": 1}},
        "run_config": {"storage_path": storage,
                       "failure_config": {"max_failures": max_failures,
                                          "restart_backoff_s": 0}},
    }
    if env:
        spec["env"] = env
    return spec


def incomplete_reason(path, world_size):
    """None when the checkpoint at `path` is complete, else what is wrong with it."""
    for rank in range(world_size):
        manifest_path = os.path.join(path, f"files_r{rank}.json")
        try:
            with open(manifest_path) as f:
                manifest = json.load(f)
        except (OSError, ValueError) as e:
            return f"rank {rank}'s manifest: {e}"
        for name, (size, crc) in manifest.items():
            try:
                with open(os.path.join(path, name), "rb") as f:
                    data = f.read()
            except OSError as e:
                return f"{name}: {e}"
            if len(data) != size or zlib.crc32(data) != crc:
                return f"{name}: {len(data)} bytes, crc {zlib.crc32(data)}; expected {size}, {crc}"
    with open(os.path.join(path, "state.json")) as f:
        json.load(f)
    return None


def staged_uploads(storage, job_id, attempt):
    """Staged rank dirs of `attempt` whose first blob is not yet full: a background write
    has begun (the snapshot created the file) and not ended."""
    out = []
    pattern = os.path.join(storage, f"*-{job_id}", ".staging", f"attempt_{attempt}", "seq_*",
                           "rank_*", "blob_r*_0")
    for blob in glob.glob(pattern):
        try:
            size = os.path.getsize(blob)
        except OSError:
            continue
        out.append((blob, size))
    return out
