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
VARIANTS = ("cold", "warm", "torchrun")
LABELS = {"cold": "traintl, cold (library uploaded)", "warm": "traintl, warm (library stored)",
          "torchrun": "torchrun (Debian torch 1.13)"}


def phases(stamps, t0):
    """Seconds from t0 to the later rank's loop entry, user-code entry and fork."""
    loop, entry, forked = (max(s[k] for s in stamps) for k in range(3))
    return {"loop": (loop - t0) / 1e9, "entry": (entry - t0) / 1e9, "forked": (forked - t0) / 1e9}


def run_traintl(daemon, spec_path, out_dir):
    """One timed submission; returns its phases (see phases()) plus "cli" (the CLI exited)
    and "attempt" (the job's started_at: the daemon started the attempt; ms resolution)."""
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
    result = phases(s, t0)
    result["cli"] = (t_cli - t0) / 1e9
    result["attempt"] = (job["started_at"] * 1000000 - t0) / 1e9
    return result


def run_torchrun(out_dir):
    """One timed torchrun; returns its phases (see phases())."""
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
    return phases(s, t0)


def fresh_dir(root, name):
    path = os.path.join(root, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def report(machine, rounds, elapsed, lib_size, runs):
    """The RESULTS.md section; runs[variant] is the list of phase dicts in run order."""
    loops = {v: [r["loop"] for r in runs[v]] for v in VARIANTS}
    tr_med, tr_p90 = bl.median(loops["torchrun"]), bl.p90(loops["torchrun"])
    main_rows, phase_rows = [], []
    for v in VARIANTS:
        xs = loops[v]
        med, q90 = bl.median(xs), bl.p90(xs)
        if v == "torchrun":
            ratios = ["1", "1", "1"]
        else:
            paired = [a / b for a, b in zip(xs, loops["torchrun"])]
            ratios = [f"**{med / tr_med:.2f}**", f"{q90 / tr_p90:.2f}",
                      f"{bl.median(paired):.2f}"]
        main_rows.append(f"| {LABELS[v]} | {med:.3f} | {q90:.3f} | {min(xs):.3f} | "
                         f"{max(xs):.3f} | " + " | ".join(ratios) + " |")

        def col(key):
            vals = [r[key] for r in runs[v] if key in r]
            return f"{bl.median(vals):.3f}" if vals else "-"
        rendezvous = bl.median([r["loop"] - r["entry"] for r in runs[v]])
        phase_rows.append(f"| {LABELS[v]} | {col('cli')} | {col('attempt')} | {col('forked')} | "
                          f"{col('entry')} | {col('loop')} | {rendezvous:.3f} |")
    text = f"""## Startup: submit -> both ranks in the training loop (2-worker job)

{machine}. {rounds} rounds, each running the three variants once in a shuffled order;
{elapsed:.0f} s in all. Seconds from starting `traintl submit` / `torchrun` to the later
rank's timestamp on entry to its loop (after the process-group rendezvous). Ratios are
against torchrun measured in the same rounds; target: traintl/torchrun <= 0.4.
Library: {LIB_NAME}, {lib_size:.1f} MiB (uploaded by every cold run).

| variant | median s | p90 s | min s | max s | median / torchrun | p90 / torchrun | median of per-round ratios |
|---|---|---|---|---|---|---|---|
""" + "\n".join(main_rows) + """

Where the time goes (medians, seconds since the launch, later rank):

| variant | CLI returned | attempt started | workers forked | user code entered | in loop | rendezvous (loop - entered) |
|---|---|---|---|---|---|---|
""" + "\n".join(phase_rows) + """

"CLI returned": `traintl submit` exited, the job accepted (committed to the Raft log).
"attempt started": the job's `started_at` in the daemon (ms resolution). "workers forked":
the ranks' process start times from /proc (10 ms resolution). "user code entered": the
traintl entry point was called (library and LibTorch loaded) / the script finished
`import torch`. "in loop": the process group is ready (the measured time).

Raw seconds (last rank in its loop), in run order:

"""
    for v in VARIANTS:
        text += f"- {v}: " + ", ".join(f"{x:.3f}" for x in loops[v]) + "\n"
    return text


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
    runs = {v: [] for v in VARIANTS}
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
            order = list(VARIANTS)
            rng.shuffle(order)
            line = []
            for variant in order:
                fresh_dir(scratch, "stamps")
                time.sleep(args.settle)
                if variant == "torchrun":
                    result = run_torchrun(out_dir)
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
                    result = run_traintl(daemon, spec, out_dir)
                runs[variant].append(result)
                line.append(f"{variant} {result['loop']:.3f}s")
            bl.log(f"round {i + 1}/{args.rounds}: " + ", ".join(line))
    finally:
        daemon.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - started
    text = report(machine, args.rounds, elapsed, len(library_bytes) / 1024 / 1024, runs)
    bl.write_section("startup", text)


if __name__ == "__main__":
    main()
