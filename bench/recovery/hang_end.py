#!/usr/bin/python3
"""bench/recovery/hang_end: after a rank is SIGKILLed, how long the surviving rank stays in
its collective - issue 18's "hung collectives end in <= 1 s", against torchrun in the same
run.

    /usr/bin/python3 bench/recovery/hang_end.py [--build build] [--kills 20]

traintl: one job of 2 ranks of tests/e2e/libs' libtest_ddp.so (LibTorch DDP over Gloo, one
allreduce per ~1 ms step, OMP_NUM_THREADS=1) with max_failures = --kills (no restart backoff), on a one-node
daemon (<build>/bin/traintld, temp dir, port 0). Each attempt writes its ranks' pids
(pid_dir); once both ranks have stepped for 0.3 s, one of them is SIGKILLed (rank 1 and
rank 0 in turn: rank 0 holds the rendezvous store) and the survivor's process is watched
(/proc, every 1 ms) until it is gone or a zombie: the time from the kill to that is the
survivor's time stuck in its collective (it can only leave it by the collective failing,
or by being ended). The attempt then restarts (failure_config) and the next kill follows.

torchrun (Debian's torch 1.13, bench/ddp/torchrun_py311.py, --max_restarts --kills,
--monitor_interval 0.1): a Python DDP loop of the same shape (a 64x8 linear model, Gloo),
whose ranks write their pids per restart; the same kills and the same watch.

Prints per-kill times and p50/p95/max per driver, and rewrites bench/recovery/RESULTS.md's
section (unless --no-results). Target: p95 <= 1 s.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "startup"))
from benchlib import Daemon, free_port, machine_line, wait_for  # noqa: E402

TORCHRUN = os.path.join(ROOT, "bench", "ddp", "torchrun_py311.py")

TORCH_SCRIPT = r'''
import os, sys, time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
pid_dir = sys.argv[1]
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
with open(os.path.join(pid_dir, f"r{restart}_rank_{rank}.pid.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(pid_dir, f"r{restart}_rank_{rank}.pid.tmp"),
          os.path.join(pid_dir, f"r{restart}_rank_{rank}.pid"))
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 8)
while True:
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
'''


def alive(pid):
    """False once the process is gone or a zombie (it has left every collective)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def kill_and_watch(victim, survivor):
    """SIGKILLs `victim`; seconds until `survivor` is gone (None if it outlived 30 s)."""
    t0 = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    while time.monotonic() - t0 < 30:
        if not alive(survivor):
            return time.monotonic() - t0
        time.sleep(0.001)
    return None


def run_traintl(args, tmp):
    daemon = Daemon(os.path.join(args.build, "bin"), num_cpus=2)
    times = []
    try:
        daemon.start()
        pid_dir = os.path.join(tmp, "traintl-pids")
        os.makedirs(pid_dir)
        spec = {"name": "hang-end",
                "entrypoint": {"library": os.path.join(args.build, "tests/e2e/libs/libtest_ddp.so")},
                "train_loop_config": {"steps": 1 << 30, "pid_dir": pid_dir, "report_every": 1000},
                "scaling_config": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
                "run_config": {"failure_config": {"max_failures": args.kills,
                                                  "restart_backoff_s": 0}},
                "env": {"OMP_NUM_THREADS": "1"}}
        status, body = daemon.request("POST", "/v1/jobs", {"spec": spec})
        if status != 201:
            raise RuntimeError(f"submit: {status} {body}")
        job = body["job_id"]
        seen = set()
        for k in range(args.kills):
            def pids():
                p = [read_pid(os.path.join(pid_dir, f"rank_{r}.pid")) for r in (0, 1)]
                if None in p or any(x in seen for x in p) or not all(alive(x) for x in p):
                    return None
                return p
            p = wait_for(pids, 120, f"attempt {k + 1}'s ranks")
            seen.update(p)
            time.sleep(0.3)  # both in the loop, stepping
            victim = k % 2
            t = kill_and_watch(p[victim], p[1 - victim])
            times.append({"kill": k + 1, "victim": victim, "s": t})
            print(f"traintl kill {k + 1}: rank {victim} killed, rank {1 - victim} out after "
                  f"{'%.3f s' % t if t is not None else '> 30 s'}", flush=True)
        status, j = daemon.request("POST", f"/v1/jobs/{job}/stop")
    finally:
        daemon.stop()
    return times


def run_torchrun(args, tmp):
    script = os.path.join(tmp, "hang_end_ddp.py")
    with open(script, "w") as f:
        f.write(TORCH_SCRIPT)
    pid_dir = os.path.join(tmp, "torchrun-pids")
    os.makedirs(pid_dir)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = ["/usr/bin/python3", TORCHRUN, "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), "--max_restarts", str(args.kills),
           "--monitor_interval", "0.1", script, pid_dir]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    times = []
    try:
        for k in range(args.kills):
            def pids():
                p = [read_pid(os.path.join(pid_dir, f"r{k}_rank_{r}.pid")) for r in (0, 1)]
                return p if None not in p and all(alive(x) for x in p) else None
            p = wait_for(pids, 120, f"restart {k}'s ranks")
            time.sleep(0.3)
            victim = k % 2
            t = kill_and_watch(p[victim], p[1 - victim])
            times.append({"kill": k + 1, "victim": victim, "s": t})
            print(f"torchrun kill {k + 1}: rank {victim} killed, rank {1 - victim} out after "
                  f"{'%.3f s' % t if t is not None else '> 30 s'}", flush=True)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    return times


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--no-results", action="store_true")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    tmp = tempfile.mkdtemp(prefix="bench-hang-end-")
    started = time.time()
    try:
        res = {"traintl": run_traintl(args, tmp), "torchrun": run_torchrun(args, tmp)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with open("/tmp/bench-hang-end-last_run.json", "w") as f:
        json.dump(res, f, indent=1)
    rows = []
    summary = {}
    for name, times in res.items():
        xs = [t["s"] for t in times if t["s"] is not None]
        stuck = len(times) - len(xs)
        summary[name] = (statistics.median(xs), pct(xs, 0.95), max(xs), stuck)
        rows.append("| %s | %d | %.3f | %.3f | %.3f | %d |" % (
            name, len(times), *summary[name]))
    ratio = summary["traintl"][1] / summary["torchrun"][1]
    text = "\n".join([
        "Measured by `/usr/bin/python3 bench/recovery/hang_end.py --kills %d` in %.0f s." % (
            args.kills, time.time() - started),
        machine_line(), "",
        "| driver | kills | p50 s | p95 s | max s | survivors still in after 30 s |",
        "|---|---|---|---|---|---|", *rows, "",
        "traintl p95 / torchrun p95: %.2f. Target (traintl p95 <= 1 s): **%s**." % (
            ratio, "met" if summary["traintl"][1] <= 1.0 and summary["traintl"][3] == 0
            else "NOT met"),
        "Per kill (s; victim rank in brackets): " + "; ".join(
            "%s %s" % (name, " ".join("%.3f(%d)" % (t["s"] if t["s"] is not None else -1,
                                                    t["victim"]) for t in times))
            for name, times in res.items()) + "."])
    print(text)
    if not args.no_results:
        path = os.path.join(HERE, "RESULTS.md")
        begin, end = "<!-- BEGIN hang_end -->", "<!-- END hang_end -->"
        old = open(path).read() if os.path.exists(path) else (
            "# bench/recovery results\n\n" + begin + "\n" + end + "\n")
        if begin not in old:
            old += "\n" + begin + "\n" + end + "\n"
        head, rest = old.split(begin, 1)
        with open(path, "w") as f:
            f.write(head + begin + "\n" + text + "\n" + end + rest.split(end, 1)[1])


if __name__ == "__main__":
    main()
