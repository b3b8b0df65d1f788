#!/usr/bin/python3
"""The Python peer's driver: distributed XGBoost launched without traintl.

    py_driver.py --workers 2 --out DIR -- <py_worker.py arguments but --rank/--world>

What a user of XGBoost's Python package does without a cluster service (and what Ray's
XGBoost integration does inside its driver): start XGBoost's own rabit tracker
(xgboost.tracker.RabitTracker on 127.0.0.1, port 0 = a free one; sortby="task", as
xgboost.dask does, so that task ids are ranks, as with traintl's tracker), start the worker
processes with the tracker's environment (tracker.worker_envs(): DMLC_TRACKER_URI and
DMLC_TRACKER_PORT, plus OMP_NUM_THREADS=1), wait for them and for the tracker. Each
worker's output goes to DIR/worker<R>.log. Exits non-zero when a worker fails (the
others are then killed). Writes DIR/driver.json: time.time() at its first line, after
importing the tracker, when the tracker listens, when the workers were started; and
DIR/driver_end.json at the end: its own CPU seconds (the tracker included) and its workers'.
"""
import time

T_START = time.time()

import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from xgboost.tracker import RabitTracker  # noqa: E402

T_IMPORTED = time.time()
HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    argv = sys.argv[1:]
    sep = argv.index("--")
    own, worker_args = argv[:sep], argv[sep + 1:]
    workers = int(own[own.index("--workers") + 1])
    out = own[own.index("--out") + 1]

    tracker = RabitTracker(host_ip="127.0.0.1", n_workers=workers, sortby="task")
    tracker.start(workers)
    t_tracker = time.time()
    env = dict(os.environ)
    env.update({k: str(v) for k, v in tracker.worker_envs().items()})
    env["OMP_NUM_THREADS"] = "1"
    procs = []
    for r in range(workers):
        log = open(os.path.join(out, f"worker{r}.log"), "wb")
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "py_worker.py"), "--rank", str(r),
             "--world", str(workers), "--out", out] + worker_args,
            stdout=log, stderr=subprocess.STDOUT, env=env))
        log.close()
    t_spawned = time.time()
    with open(os.path.join(out, "driver.json"), "w") as f:
        json.dump({"start": T_START, "imported": T_IMPORTED, "tracker": t_tracker,
                   "spawned": t_spawned, "port": tracker.port}, f)
    failed = None
    by_pid = {p.pid: r for r, p in enumerate(procs)}
    while by_pid:  # blocks until a worker exits (no polling while they train)
        pid, status = os.wait()
        if pid not in by_pid:
            continue
        r = by_pid.pop(pid)
        procs[r].returncode = os.waitstatus_to_exitcode(status)
        if procs[r].returncode != 0 and failed is None:
            failed = (r, procs[r].returncode)
            for q in by_pid:
                procs[by_pid[q]].kill()
    if failed:
        sys.stderr.write(f"worker {failed[0]} exited {failed[1]}\n")
        sys.exit(1)
    tracker.join()
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(os.path.join(out, "driver_end.json"), "w") as f:
        json.dump({"end": time.time(), "cpu_self": me.ru_utime + me.ru_stime,
                   "cpu_workers": kids.ru_utime + kids.ru_stime}, f)


if __name__ == "__main__":
    main()
