#!/usr/bin/python3
"""bench/recovery/peer_recovery: SIGKILL of 1 of 2 ranks in the middle of a step -> how long
until training completes a step again, how many steps are redone, and whether a committed
step is lost: traintl's peer recovery against torchrun's restart from the checkpoint, in the
same run (issue 18, item 4).

    /usr/bin/python3 bench/recovery/peer_recovery.py [--build build] [--trials 10]

The same work on both sides: a 32-16-4 MLP, SGD with momentum 0.9, 2 ranks with Gloo, each
step's batch a function of (step, rank), `--step-ms` of sleep per step standing for compute,
a checkpoint every 10 steps, `--steps` steps; in each trial the rank `trial % 2` SIGKILLs
itself in the middle of step `--kill-step` (after the forward pass, before the gradient
allreduce), having written the time to kill.txt. Each rank appends "<step> <unix ns>" to a
file when it completes a step.

traintl: tests/e2e/libs' libtest_peer_recovery.so (traintl::torch::run_steps) with
failure_config.peer_recovery on a one-node daemon with --warm-workers 4 (the trial waits for
the pool to be full first); the replacement takes the survivor's state over the network.
torchrun (Debian's torch 1.13, bench/ddp/torchrun_py311.py, --max_restarts 1,
--monitor_interval 0.1): the same loop in Python (DistributedDataParallel), rank 0 saving
model and optimizer with torch.save every 10 steps (to a temp file, then renamed); a restart
loads the latest and goes on after its step.

Per trial: seconds from the kill to the first step completed after it (by any rank), and to
the completion of the step that was in progress (the loop has its progress back); steps
completed twice (replayed); the committed checkpoint steps lost (a checkpoint that existed
before the kill and is gone after it, or a last checkpoint missing). Rewrites
bench/recovery/RESULTS.md's section (unless --no-results). Targets: 0 committed lost, <= 1
replayed, <= 1 s to the next completed step.
"""
import argparse
import json
import os
import shutil
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
import os, signal, sys, time
import torch
import torch.distributed as dist
out, steps, step_ms, kill_rank, kill_step = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                             int(sys.argv[4]), int(sys.argv[5]))
dist.init_process_group("gloo")
rank = dist.get_rank()
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
model = torch.nn.parallel.DistributedDataParallel(net)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
ckpt = os.path.join(out, "ckpt.pt")
first = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    net.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    first = state["step"] + 1
log = open(os.path.join(out, f"steps_rank{rank}_gen{restart}.txt"), "a")
for step in range(first, steps):
    opt.zero_grad()
    torch.manual_seed(step * 1000 + rank)
    x, y = torch.randn(16, 32), torch.randn(16, 4)
    loss = torch.nn.functional.mse_loss(model(x), y)
    time.sleep(step_ms / 1000)
    if restart == 0 and rank == kill_rank and step == kill_step:
        with open(os.path.join(out, "kill.txt"), "w") as f:
            f.write(str(time.time_ns()))
        os.kill(os.getpid(), signal.SIGKILL)
    loss.backward()
    opt.step()
    log.write(f"{step} {time.time_ns()}\n")
    log.flush()
    if (step + 1) % 10 == 0 and rank == 0:
        torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "step": step},
                   ckpt + ".tmp")
        os.rename(ckpt + ".tmp", ckpt)
        with open(os.path.join(out, "committed.txt"), "a") as f:
            f.write(f"{step} {time.time_ns()}\n")
'''


def read_stamps(out):
    """{file name: [(step, unix ns)]} of the ranks' step logs."""
    stamps = {}
    for name in os.listdir(out):
        if name.startswith("steps_rank"):
            with open(os.path.join(out, name)) as f:
                stamps[name] = [tuple(map(int, line.split())) for line in f if line.strip()]
    return stamps


def measure(out, kill_step, steps):
    with open(os.path.join(out, "kill.txt")) as f:
        kill = int(f.read())
    stamps = read_stamps(out)
    after = [t for rows in stamps.values() for s, t in rows if t > kill]
    back = [t for rows in stamps.values() for s, t in rows if t > kill and s == kill_step]
    # Steps completed twice: per rank (0 and 1), over its incarnations.
    replayed = 0
    for r in (0, 1):
        done = [s for name, rows in stamps.items() if name.startswith(f"steps_rank{r}_")
                for s, _ in rows]
        replayed = max(replayed, len(done) - len(set(done)))
    complete = all(sorted({s for name, rows in stamps.items() if name.startswith(f"steps_rank{r}_")
                           for s, _ in rows}) == list(range(steps)) for r in (0, 1))
    return {"next_step_s": (min(after) - kill) / 1e9 if after else None,
            "progress_back_s": (min(back) - kill) / 1e9 if back else None,
            "replayed": replayed, "complete": complete}


def warm_count(daemon):
    n = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if int(fields[1]) == daemon.proc.pid and b"--warm" in cmd and fields[0] != "Z":
            n += 1
    return n


def run_traintl(args, tmp):
    lib = os.path.join(args.build, "tests/e2e/libs/libtest_peer_recovery.so")
    daemon = Daemon(os.path.join(args.build, "bin"), num_cpus=2,
                    extra_args=["--warm-workers", "4"])
    results = []
    try:
        daemon.start()
        for k in range(args.trials):
            wait_for(lambda: warm_count(daemon) >= 4, 120, "4 warm workers")
            out = os.path.join(tmp, f"traintl-{k}")
            os.makedirs(out)
            victim = k % 2
            spec = {"name": f"peer-{k}", "entrypoint": {"library": lib},
                    "train_loop_config": {"steps": args.steps, "step_ms": args.step_ms,
                                          "kill_rank": victim, "kill_step": args.kill_step,
                                          "report_every": 10, "ckpt": True, "out_dir": out},
                    "scaling_config": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
                    "run_config": {"failure_config": {"max_failures": 1, "peer_recovery": True}},
                    "env": {"OMP_NUM_THREADS": "1"}}
            status, body = daemon.request("POST", "/v1/jobs", {"spec": spec})
            if status != 201:
                raise RuntimeError(f"submit: {status} {body}")
            job_id = body["job_id"]

            def ended():
                j = daemon.get(f"/v1/jobs/{job_id}")[1]
                return j if j["state"] in ("SUCCEEDED", "FAILED", "STOPPED") else None
            job = wait_for(ended, 300, f"job {job_id}")
            m = measure(out, args.kill_step, args.steps)
            last = (job.get("latest_checkpoint") or {}).get("seq", -1)
            # Every checkpoint (one per 10 steps) committed, the job in its first attempt.
            m["committed_lost"] = (args.steps // 10 - 1) - last
            m["ok"] = job["state"] == "SUCCEEDED" and job["attempt"] == 1 and m["complete"]
            m["victim"] = victim
            results.append(m)
            print(f"traintl trial {k + 1}: {json.dumps(m)}", flush=True)
    finally:
        daemon.stop()
    return results


def run_torchrun(args, tmp):
    script = os.path.join(tmp, "peer_recovery_ddp.py")
    with open(script, "w") as f:
        f.write(TORCH_SCRIPT)
    results = []
    for k in range(args.trials):
        out = os.path.join(tmp, f"torchrun-{k}")
        os.makedirs(out)
        victim = k % 2
        env = dict(os.environ, OMP_NUM_THREADS="1")
        cmd = ["/usr/bin/python3", TORCHRUN, "--nproc_per_node", "2", "--master_addr",
               "127.0.0.1", "--master_port", str(free_port()), "--max_restarts", "1",
               "--monitor_interval", "0.1", script, out, str(args.steps), str(args.step_ms),
               str(victim), str(args.kill_step)]
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=env, timeout=600)
        m = measure(out, args.kill_step, args.steps)
        with open(os.path.join(out, "kill.txt")) as f:
            kill = int(f.read())
        with open(os.path.join(out, "committed.txt")) as f:
            committed = [tuple(map(int, line.split())) for line in f if line.strip()]
        before = {s for s, t in committed if t < kill}
        # torchrun's checkpoints are files, each replaced by the next: one committed before
        # the kill is lost only if the restart did not start from the latest of them.
        m["committed_lost"] = 0 if not before or max(before) + 1 <= args.kill_step else 1
        m["ok"] = proc.returncode == 0 and m["complete"]
        m["victim"] = victim
        results.append(m)
        print(f"torchrun trial {k + 1}: {json.dumps(m)}", flush=True)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--kill-step", type=int, default=45)
    ap.add_argument("--step-ms", type=int, default=20)
    ap.add_argument("--no-results", action="store_true")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    tmp = tempfile.mkdtemp(prefix="bench-peer-recovery-")
    started = time.time()
    try:
        res = {"traintl": run_traintl(args, tmp), "torchrun": run_torchrun(args, tmp)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with open("/tmp/bench-peer-recovery-last_run.json", "w") as f:
        json.dump(res, f, indent=1)
    rows, med = [], {}
    for name, trials in res.items():
        nxt = [t["next_step_s"] for t in trials if t["next_step_s"] is not None]
        back = [t["progress_back_s"] for t in trials if t["progress_back_s"] is not None]
        med[name] = (statistics.median(nxt), statistics.median(back))
        rows.append("| %s | %d | %d | %.3f | %.3f | %.3f | %d | %d |" % (
            name, len(trials), sum(t["ok"] for t in trials), med[name][0], max(nxt),
            med[name][1], max(t["replayed"] for t in trials),
            max(t["committed_lost"] for t in trials)))
    t = res["traintl"]
    met = (all(x["ok"] for x in t) and max(x["replayed"] for x in t) <= 1 and
           max(x["committed_lost"] for x in t) == 0 and
           max(x["next_step_s"] for x in t) <= 1.0)
    text = "\n".join([
        "Measured by `/usr/bin/python3 bench/recovery/peer_recovery.py --trials %d` in %.0f s "
        "(%d steps of %d ms, the kill in step %d)." % (
            args.trials, time.time() - started, args.steps, args.step_ms, args.kill_step),
        machine_line(), "",
        "| driver | trials | finished whole | next step done, median s | max s | "
        "progress back, median s | max steps replayed | max committed lost |",
        "|---|---|---|---|---|---|---|---|", *rows, "",
        "traintl / torchrun, median time to the next completed step: %.3f; to the progress "
        "back: %.3f. Target (traintl: 0 committed lost, <= 1 replayed, <= 1 s to the next "
        "completed step, every trial): **%s**." % (
            med["traintl"][0] / med["torchrun"][0], med["traintl"][1] / med["torchrun"][1],
            "met" if met else "NOT met")])
    print(text)
    if not args.no_results:
        path = os.path.join(HERE, "RESULTS.md")
        begin, end = "<!-- BEGIN peer_recovery -->", "<!-- END peer_recovery -->"
        old = open(path).read()
        if begin not in old:
            old = old.replace("## Notes (by hand", begin + "\n" + end + "\n\n## Notes (by hand", 1)
        head, rest = old.split(begin, 1)
        with open(path, "w") as f:
            f.write(head + begin + "\n" + text + "\n" + end + rest.split(end, 1)[1])


if __name__ == "__main__":
    main()
