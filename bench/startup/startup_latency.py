"""Benchmark 1: submit -> every rank inside its training loop, 2-worker job, traintl vs torchrun.

traintl: the daemon is already running and idle; the clock starts when `traintl submit
job.json` is started and stops at the later of the two ranks' timestamps, written by
libbench_startup_train.so on entry to its loop, right after traintl::torch::process_group()
(the rendezvous). Two variants:
  cold: a library the daemon has never seen (a copy with a unique suffix, so a new sha256):
        the CLI hashes it, HEADs (404) and PUTs it, then submits;
  warm: the same library every time (already uploaded): HEAD 200, submit.
torchrun: the clock starts when `torchrun --nproc_per_node 2 torchrun_peer.py` is started
and stops at the later of the two ranks' timestamps, written after
dist.init_process_group("gloo").

The three variants are interleaved in a shuffled order in every round, so that the load of
a shared machine falls on all of them alike. Usage (run.sh does this):
  startup_latency.py --bin <build>/bin --libs <dir of libbench_startup_train.so> [--rounds N]
"""
import argparse
import os
import random
import shutil
import subprocess
import tempfile
import time

import benchlib as bl

LIB_NAME = "libbench_startup_train.so"


def run_traintl(daemon, spec_path, out_dir):
    """One timed submission; returns seconds to (the last rank in its loop, the CLI's exit,
    the daemon's start of the attempt: the job's started_at, ms resolution)."""
    t0 = time.time_ns()
    cli = subprocess.Popen([os.path.join(daemon.bin_dir, "traintl"), "--data-dir",
                            daemon.data_dir, "submit", spec_path],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = cli.communicate(timeout=120)
    t_cli = time.time_ns()
    if cli.returncode != 0:
        raise RuntimeError(f"traintl submit failed ({cli.returncode}): {out}{err}")
    job_id = out.strip().split()[-1]

    def stamps():
        s = bl.read_stamps(out_dir, 2)
        if s is None:
            status, job = daemon.get(f"/v1/jobs/{job_id}")
            if status == 200 and job["state"] in ("FAILED", "STOPPED"):
                raise RuntimeError(f"job {job_id} {job['state']}: {job.get('message')}\n"
                                   + daemon.log())
        return s
    s = bl.wait_for(stamps, 120, f"both ranks of job {job_id} in their loop")
    daemon.wait_idle()
    status, job = daemon.get(f"/v1/jobs/{job_id}")
    if job["state"] != "SUCCEEDED":
        raise RuntimeError(f"job {job_id} {job['state']}: {job.get('message')}")
    return (max(s) - t0) / 1e9, (t_cli - t0) / 1e9, (job["started_at"] * 1000000 - t0) / 1e9


def run_torchrun(out_dir):
    """One timed torchrun; returns seconds to the last rank in its loop."""
    port = bl.free_port()
    cmd = [bl.TORCH_PYTHON, bl.TORCHRUN, "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(port), bl.PEER, "--out-dir", out_dir]
    t0 = time.time_ns()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        bl.stop_process_group(proc)
        raise
    s = bl.read_stamps(out_dir, 2)
    if proc.returncode != 0 or s is None:
        raise RuntimeError(f"torchrun failed ({proc.returncode}):\n{out.decode(errors='replace')}")
    return (max(s) - t0) / 1e9


def fresh_dir(root, name):
    path = os.path.join(root, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--libs", required=True)
    parser.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", 10)))
    parser.add_argument("--settle", type=float, default=0.5,
                        help="seconds of quiet between two timed runs")
    args = parser.parse_args()

    machine = bl.machine_line()
    library = os.path.join(os.path.abspath(args.libs), LIB_NAME)
    with open(library, "rb") as f:
        library_bytes = f.read()
    scratch = tempfile.mkdtemp(prefix="traintl-bench-startup-")
    daemon = bl.Daemon(os.path.abspath(args.bin))
    results = {"cold": [], "warm": [], "torchrun": []}
    cli_exit = {"cold": [], "warm": []}
    scheduled = {"cold": [], "warm": []}
    started = time.monotonic()
    try:
        daemon.start()
        out_dir = os.path.join(scratch, "stamps")
        warm_spec = bl.write_spec(os.path.join(scratch, "warm.json"), library, "startup_loop",
                                  {"out_dir": out_dir}, 2, "bench-startup-warm")
        # Untimed warm-up: uploads the warm library and brings libtorch, Python and torch
        # into the page cache for both sides.
        bl.log("warm-up: one traintl job, one torchrun")
        fresh_dir(scratch, "stamps")
        run_traintl(daemon, warm_spec, out_dir)
        fresh_dir(scratch, "stamps")
        run_torchrun(out_dir)

        rng = random.Random(20240601)
        for i in range(args.rounds):
            order = ["cold", "warm", "torchrun"]
            rng.shuffle(order)
            line = []
            for variant in order:
                fresh_dir(scratch, "stamps")
                time.sleep(args.settle)
                if variant == "torchrun":
                    last = run_torchrun(out_dir)
                else:
                    spec = warm_spec
                    if variant == "cold":
                        # Trailing bytes after an ELF image are ignored by the loader; they
                        # give the copy a sha256 the daemon has never stored.
                        lib = os.path.join(scratch, f"cold-{i}-{LIB_NAME}")
                        with open(lib, "wb") as f:
                            f.write(library_bytes + os.urandom(32))
                        spec = bl.write_spec(os.path.join(scratch, f"cold-{i}.json"), lib,
                                             "startup_loop", {"out_dir": out_dir}, 2,
                                             "bench-startup-cold")
                    last, cli_s, sched_s = run_traintl(daemon, spec, out_dir)
                    cli_exit[variant].append(cli_s)
                    scheduled[variant].append(sched_s)
                results[variant].append(last)
                line.append(f"{variant} {last:.3f}s")
            bl.log(f"round {i + 1}/{args.rounds}: " + ", ".join(line))
    finally:
        daemon.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - started

    tr_med, tr_p90 = bl.median(results["torchrun"]), bl.p90(results["torchrun"])
    rows = []
    labels = {"cold": "traintl, cold (library uploaded)", "warm": "traintl, warm (library stored)",
              "torchrun": "torchrun (Debian torch 1.13)"}
    for v in ("cold", "warm", "torchrun"):
        xs = results[v]
        med, q90 = bl.median(xs), bl.p90(xs)
        ratio = f"{med / tr_med:.2f}" if v != "torchrun" else "1"
        ratio90 = f"{q90 / tr_p90:.2f}" if v != "torchrun" else "1"
        cli = f"{bl.median(cli_exit[v]):.3f}" if v in cli_exit else "-"
        sched = f"{bl.median(scheduled[v]):.3f}" if v in scheduled else "-"
        rows.append(f"| {labels[v]} | {med:.3f} | {q90:.3f} | {min(xs):.3f} | {max(xs):.3f} | "
                    f"{cli} | {sched} | **{ratio}** | {ratio90} |")
    lib_size = len(library_bytes) / 1024 / 1024
    text = f"""## Startup: submit -> both ranks in the training loop (2-worker job)

{machine}. {args.rounds} rounds, each running the three variants once in a shuffled order;
{elapsed:.0f} s in all. Seconds from starting `traintl submit` / `torchrun` to the later
rank's timestamp on entry to its loop (after the process-group rendezvous). Ratios are
against torchrun measured in the same rounds; target: traintl/torchrun <= 0.4.
Library: {LIB_NAME}, {lib_size:.1f} MiB (uploaded by every cold run).

| variant | median s | p90 s | min s | max s | CLI returned, median s | attempt started, median s | median / torchrun | p90 / torchrun |
|---|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + """

"CLI returned": `traintl submit` exited, the job accepted (committed to the Raft log).
"attempt started": the daemon's `started_at` of the job (ms resolution): the head placed
the attempt and the agent starts the workers. The rest, up to the median, is starting
traintl-worker, loading the library and LibTorch, and the rendezvous.

Raw seconds (last rank), in run order:

"""
    for v in ("cold", "warm", "torchrun"):
        text += f"- {v}: " + ", ".join(f"{x:.3f}" for x in results[v]) + "\n"
    bl.write_section("startup", text)


if __name__ == "__main__":
    main()
