"""Timestamps shared by the bench/python scripts (stdlib only; imported by every rank).

Each stamp is one JSON object written atomically (tmp + rename) to <out>/<name>.json, so
that the driver never reads half a file. Times are wall-clock seconds (time.time()), which
the driver compares with its own time.time() on the same machine.
"""
import json
import os
import time


def process_start(pid="self"):
    """When process `pid` was forked, as wall-clock seconds (10 ms resolution: /proc's
    starttime counts clock ticks since boot)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[19])  # field 22, starttime
    boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def write(out_dir, name, **fields):
    path = os.path.join(out_dir, f"{name}.json")
    fields.setdefault("pid", os.getpid())
    with open(path + ".tmp", "w") as f:
        json.dump(fields, f)
    os.replace(path + ".tmp", path)
