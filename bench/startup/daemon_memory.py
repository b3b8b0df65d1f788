"""Benchmark 2: the resident memory of traintld (the daemon process only, not its workers).

Phases, one fresh daemon (single node, head + agent in one process):
  idle         started, head, no job yet (sampled after a settle time);
  after 100    100 small jobs (1 worker each, libbench_small_train.so, 3 reports each)
               submitted one after another with `traintl submit`, all ended;
  2-worker job while a 2-worker LibTorch job (libbench_startup_train.so) is inside its
               training loop; the maximum of several samples.
Peers measured in the same run:
  `python3 -c "import torch"` idle (Debian torch 1.13): what any Python launcher costs;
  torchrun's agent process (the torchrun process itself, which runs the elastic agent)
  while its 2 workers run torchrun_peer.py: the process doing the daemon's job for torchrun.
VmRSS and VmHWM come from /proc/<pid>/status; Rss, Pss, Pss_Anon, Pss_File from
/proc/<pid>/smaps_rollup. Usage (run.sh does this):
  daemon_memory.py --bin <build>/bin --libs <dir of the bench libraries> [--jobs 100]
"""
import argparse
import os
import shutil
import subprocess
import tempfile
import time

import benchlib as bl


def sample(pid, count=5, interval=0.4):
    samples = []
    for i in range(count):
        if i:
            time.sleep(interval)
        samples.append(bl.memory_kb(pid))
    return bl.max_memory(samples)


def python_import_torch():
    proc = subprocess.Popen([bl.TORCH_PYTHON, "-c",
                             "import sys, torch; print('ready', flush=True); sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("python3 -c 'import torch' did not start")
        time.sleep(0.5)
        return sample(proc.pid, count=3)
    finally:
        proc.stdin.close()
        proc.wait(30)


def torchrun_agent(out_dir, hold_ms):
    port = bl.free_port()
    proc = subprocess.Popen([bl.TORCH_PYTHON, bl.TORCHRUN, "--nproc_per_node", "2",
                             "--master_addr", "127.0.0.1", "--master_port", str(port), bl.PEER,
                             "--out-dir", out_dir, "--hold-ms", str(hold_ms)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        bl.wait_for(lambda: proc.poll() is not None or bl.read_stamps(out_dir, 2), 120,
                    "torchrun's ranks in their loop")
        if proc.poll() is not None:
            raise RuntimeError(f"torchrun exited with {proc.returncode}")
        mem = sample(proc.pid)
        proc.wait(hold_ms / 1000 + 60)
        return mem
    finally:
        bl.stop_process_group(proc)


def row(label, mem):
    cells = [label, f"{bl.mib(mem['VmRSS']):.1f}", f"{bl.mib(mem['Pss']):.1f}",
             f"{bl.mib(mem['Pss_Anon']):.1f}", f"{bl.mib(mem['Pss_File']):.1f}",
             f"{bl.mib(mem['VmHWM']):.1f}"]
    return "| " + " | ".join(cells) + " |"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--libs", required=True)
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("BENCH_JOBS", 100)))
    parser.add_argument("--hold-ms", type=int, default=6000,
                        help="how long the 2-worker jobs stay in their loop")
    args = parser.parse_args()

    machine = bl.machine_line()
    libs = os.path.abspath(args.libs)
    scratch = tempfile.mkdtemp(prefix="traintl-bench-memory-")
    daemon = bl.Daemon(os.path.abspath(args.bin))
    started = time.monotonic()
    try:
        bl.log("peer: python3 -c 'import torch'")
        py_idle = python_import_torch()
        bl.log("peer: torchrun agent during a 2-worker job")
        os.makedirs(os.path.join(scratch, "torchrun"))
        agent = torchrun_agent(os.path.join(scratch, "torchrun"), args.hold_ms)

        daemon.start()
        time.sleep(2.0)
        idle = sample(daemon.pid)
        bl.log(f"traintld idle: VmRSS {bl.mib(idle['VmRSS']):.1f} MiB")

        small_spec = bl.write_spec(os.path.join(scratch, "small.json"),
                                   os.path.join(libs, "libbench_small_train.so"), "small_loop",
                                   {"reports": 3}, 1, "bench-small")
        t_jobs = time.monotonic()
        for i in range(args.jobs):
            p = daemon.cli("submit", small_spec)
            if p.returncode != 0:
                raise RuntimeError(f"submit {i} failed: {p.stdout}{p.stderr}")
        jobs = daemon.wait_all_terminal(timeout=300)
        bl.wait_for(lambda: not daemon.worker_pids(), 60, "worker processes to exit")
        jobs_s = time.monotonic() - t_jobs
        succeeded = sum(1 for j in jobs if j["state"] == "SUCCEEDED")
        bl.log(f"{len(jobs)} jobs ended in {jobs_s:.1f} s, {succeeded} succeeded")
        time.sleep(1.0)
        after_jobs = sample(daemon.pid)

        out_dir = os.path.join(scratch, "traintl")
        os.makedirs(out_dir)
        big_spec = bl.write_spec(os.path.join(scratch, "ddp.json"),
                                 os.path.join(libs, "libbench_startup_train.so"), "startup_loop",
                                 {"out_dir": out_dir, "hold_ms": args.hold_ms}, 2, "bench-ddp")
        p = daemon.cli("submit", big_spec)
        if p.returncode != 0:
            raise RuntimeError(f"submit failed: {p.stdout}{p.stderr}")
        bl.wait_for(lambda: bl.read_stamps(out_dir, 2), 120, "traintl ranks in their loop")
        running = sample(daemon.pid)
        workers = [bl.memory_kb(pid) for pid in daemon.worker_pids()]
        daemon.wait_idle(timeout=args.hold_ms / 1000 + 60)
        time.sleep(1.0)
        final = sample(daemon.pid, count=2)
    finally:
        daemon.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - started

    def ratio(a, b, key):
        return f"{a[key] / b[key]:.2f}"

    worker_note = ""
    if workers:
        worker_note = (f" For scale, each traintl-worker rank of that job had VmRSS "
                       + ", ".join(f"{bl.mib(w['VmRSS']):.0f}" for w in workers) + " MiB "
                       f"(LibTorch loaded; not counted above).")
    text = f"""## Daemon memory (traintld process only)

{machine}. {elapsed:.0f} s in all. {args.jobs} small jobs: {succeeded} succeeded, all ended
{jobs_s:.1f} s after the first submit. Target: VmRSS <= 30 MB idle. Peers measured in the
same run. MiB; the largest of several samples per phase.

| process, phase | VmRSS | PSS | PSS anon | PSS file | VmHWM (peak) |
|---|---|---|---|---|---|
{row("traintld, idle", idle)}
{row(f"traintld, after {args.jobs} small jobs ended", after_jobs)}
{row("traintld, 2-worker LibTorch job in its loop", running)}
{row("traintld, idle again after that job", final)}
{row("peer: python3 -c 'import torch', idle", py_idle)}
{row("peer: torchrun agent, 2-worker job in its loop", agent)}

| ratio | VmRSS | PSS |
|---|---|---|
| traintld idle / python3 `import torch` idle | **{ratio(idle, py_idle, 'VmRSS')}** | {ratio(idle, py_idle, 'Pss')} |
| traintld / torchrun agent, each running a 2-worker job | **{ratio(running, agent, 'VmRSS')}** | {ratio(running, agent, 'Pss')} |
| traintld after {args.jobs} jobs / traintld idle | {ratio(after_jobs, idle, 'VmRSS')} | {ratio(after_jobs, idle, 'Pss')} |
{worker_note}
"""
    bl.write_section("memory", text)


if __name__ == "__main__":
    main()
