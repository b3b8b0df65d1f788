#!/usr/bin/python3
"""bench/tune: `traintl tune` on one node: what ASHA saves against FIFO, and what it costs
to go from one trial to the next.

    /usr/bin/python3 bench/tune/run.py [--build build] [--seeds 1,2,3,4,5]

Everything runs against one traintld of the build (<build>/bin/traintld, started by
bench/startup/benchlib.py's Daemon in a temporary data dir, API and Raft on 127.0.0.1 port
0, --num-cpus 2), through its HTTP API (urllib, the token from <data_dir>/token, the
address from <data_dir>/api_address) and, for one peer, its CLI (<build>/bin/traintl).
Python 3 stdlib only.

(a) ASHA vs FIFO on the digits MLP (examples/digits, <build>/examples/libdigits_train.so,
    the UCI digits CSV): for every seed in --seeds, one FIFO experiment and one ASHA
    experiment per --reduction-factors entry (3), with the same tune spec but for
    tune_config.scheduler: the same search_alg seed (so the same trial configs, in the same
    order), num_samples (--samples, 64), epochs (--epochs, 20 = ASHA's max_t),
    max_concurrent_trials 2, 1 worker per trial (1 CPU), OMP_NUM_THREADS=1, lr
    loguniform(1e-4, 1e-1), hidden choice [32, 64, 128, 256], batch_size 32, torch seed 0.
    ASHA: time_attr training_iteration, grace_period --grace-period (1). Per experiment:
      - trial-epochs spent: the sum of every trial's iterations (results it reported, all
        of which cost an epoch), and how many of those came after ASHA had decided to stop
        the trial (the "at training_iteration N" of its stop reason: the job keeps training
        until the stop reaches the worker);
      - the best val_accuracy any trial reported;
      - trial-epochs to the target: the target is the lower of the pair's two bests (the
        FIFO run's and the ASHA run's, so both reach it); every result of every trial of
        the experiment, in the order the daemon committed them (GET /v1/jobs/{job}/metrics
        history[].time, ms), counted until the best-so-far reaches the target; also the
        seconds from the experiment's creation to that result.
    Reported per pair: the FIFO/ASHA ratio of the trial-epochs each experiment spent in
    all, when ASHA ended with FIFO's best val_accuracy (the target, >= 3x: a seed where
    ASHA's best is lower counts as 0x), also as it would be had every stopped trial ended
    at the rung where ASHA stopped it; and, stricter, the ratio of trial-epochs to the
    target (what the best-so-far curve shows: it favours FIFO when a good config comes
    early in the sample order, which no scheduler can beat). Training is deterministic (1 thread, fixed
    seeds), so a config trains the same way in both experiments; the script checks that
    the val_accuracy curves of the same trial agree wherever both ran. It also replays
    each ASHA experiment's results, in commit order, through a Python copy of Ray's ASHA
    arithmetic and checks every trial's stop iteration and cutoff against the daemon's
    stop reason; and it times each early stop from the deciding result's commit to the
    trial's job ending.

(b) Overhead: trial end -> next trial's first report, on the same daemon, with
    max_concurrent_trials 1 and the tiny trainer <build>/tests/e2e/libs/libtest_train.so
    (no LibTorch; train_loop_config {"epochs": 3, "sleep_ms": --sleep-ms (20)}, a
    checkpoint every epoch; param_space loss_scale uniform(0.5, 1.5), metric loss, FIFO),
    --overhead-trials trials (10) per experiment, --rounds rounds (2). A gap is the next
    trial job's first report (GET /v1/jobs/{job}/metrics history[0].time) minus the
    previous trial job's ended_at (GET /v1/jobs/{job}): both readings of the daemon's
    clock. Split into end -> next job submitted, submitted -> started, started -> first
    report. Target: median <= 0.5 s. The peers, in the same rounds, run the same trials
    (the same train_loop_configs, in the same order) as plain jobs back to back:
      - "CLI loop": `traintl submit job.json --wait` one after the other, what a shell
        loop over configs does (the CLI polls the job every 500 ms);
      - "HTTP loop": a driver that POSTs /v1/jobs, polls GET /v1/jobs/{id} every 10 ms and
        POSTs the next job as soon as one ends (the best an external driver can do).
    Each library is uploaded (PUT /v1/blobs) before anything is timed.

Prints the tables and rewrites the part of bench/tune/RESULTS.md between its
"generated" markers (unless --no-results); the text around them is kept. Every sample goes
to /tmp/bench-tune-last_run.json. The daemon and every worker it started are ended at the
end, also on failure or Ctrl-C, and the temporary dir is removed (unless --keep).
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "startup"))
from benchlib import Daemon  # noqa: E402

RESULTS = os.path.join(ROOT, "bench", "tune", "RESULTS.md")
RAW = "/tmp/bench-tune-last_run.json"
BEGIN = "<!-- BEGIN generated by bench/tune/run.py -->"
END = "<!-- END generated by bench/tune/run.py -->"
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# Experiments and jobs


def wait_experiment(d, exp_id, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        e = d.get_ok("/v1/tune/" + exp_id)
        if e["state"] != "RUNNING":
            return e
        time.sleep(0.25)
    raise RuntimeError("experiment %s still RUNNING after %d s" % (exp_id, timeout))


def wait_job(d, job_id, timeout=600, interval=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        j = d.get_ok("/v1/jobs/" + job_id)
        if j["state"] in TERMINAL:
            return j
        time.sleep(interval)
    raise RuntimeError("job %s not ended after %d s" % (job_id, timeout))


def run_tune(d, spec, sha, timeout=900):
    created = d.post_ok("/v1/tune", {"spec": spec, "library_sha256": sha})
    e = wait_experiment(d, created["experiment_id"], timeout)
    if e["state"] != "SUCCEEDED":
        raise RuntimeError("experiment %s ended %s: %s\n%s" % (e["experiment_id"], e["state"],
                                                              e.get("message"), d.log_tail()))
    return e


def trial_reports(d, trial, metric):
    """Every result of the trial, from all its jobs: (time_ms, trial index, iteration, value)."""
    jobs = trial.get("jobs") or [trial["job_id"]]
    out = []
    for job_id in jobs:
        for h in d.get_ok("/v1/jobs/%s/metrics" % job_id)["history"]:
            out.append((h["time"], trial["index"], len(out) + 1, h["metrics"].get(metric)))
    return out


# ---------------------------------------------------------------------------------------
# (a) ASHA vs FIFO


def digits_spec(lib, data, args, seed, scheduler):
    return {
        "trainer": {
            "name": "bench-digits",
            "entrypoint": {"library": lib, "function": "train_loop"},
            "train_loop_config": {"lr": 0.01, "epochs": args.epochs, "batch_size": 32, "seed": 0,
                                  "hidden": 128},
            "scaling_config": {"num_workers": 1, "resources_per_worker": {"CPU": 1}},
            "run_config": {"checkpoint_config": {"num_to_keep": 2,
                                                 "checkpoint_score_attribute": "val_accuracy",
                                                 "checkpoint_score_order": "max"}},
            "datasets": {"digits": {"uri": "file://" + data, "format": "csv", "split": False}},
            "env": {"OMP_NUM_THREADS": "1"},
        },
        "param_space": {"train_loop_config": {"lr": {"loguniform": [1e-4, 1e-1]},
                                              "hidden": {"choice": [32, 64, 128, 256]}}},
        "tune_config": {"metric": "val_accuracy", "mode": "max", "num_samples": args.samples,
                        "max_concurrent_trials": 2,
                        "search_alg": {"type": "random", "seed": seed},
                        "scheduler": scheduler},
    }


STOP_AT = re.compile(r"at training_iteration (\d+)")


def summarize_experiment(d, e):
    trials = sorted(e["trials"], key=lambda t: t["index"])
    reports = []
    per_trial = []
    overrun = 0
    startups, epochs, stop_lat = [], [], []
    for t in trials:
        r = trial_reports(d, t, "val_accuracy")
        reports += r
        first_job = d.get_ok("/v1/jobs/" + (t.get("jobs") or [t["job_id"]])[0])
        if r:
            startups.append((r[0][0] - first_job["submitted_at"]) / 1000.0)
            epochs += [(y[0] - x[0]) / 1000.0 for x, y in zip(r, r[1:])]
        decided = None
        m = STOP_AT.search(t.get("reason") or "")
        if m:
            decided = int(m.group(1))
            overrun += max(0, len(r) - decided)
            if 0 < decided <= len(r) and first_job.get("ended_at"):
                stop_lat.append((first_job["ended_at"] - r[decided - 1][0]) / 1000.0)
        per_trial.append({"index": t["index"], "config": t["config"]["train_loop_config"],
                          "iterations": len(r), "stop_decided_at": decided,
                          "reason": t.get("reason"), "curve": [x[3] for x in r]})
    reports.sort()
    vals = [x[3] for x in reports if isinstance(x[3], (int, float))]
    return {"experiment_id": e["experiment_id"], "created_at": e["created_at"],
            "ended_at": e["ended_at"], "trials": per_trial,
            "wall_s": (e["ended_at"] - e["created_at"]) / 1000.0,
            "startup_s": statistics.median(startups) if startups else None,
            "epoch_s": statistics.median(epochs) if epochs else None,
            # ASHA's stops: the deciding result committed -> the trial's job ended.
            "stop_latency_s": stop_lat, "reports": reports,
            "epochs": len(reports), "overrun": overrun, "best": max(vals) if vals else None,
            "best_trial": e["best_trial"]["name"] if e.get("best_trial") else None,
            "best_config": e["best_trial"]["config"]["train_loop_config"]
            if e.get("best_trial") else None,
            # ASHA's cutoff stops name the rung ("at training_iteration N"); max_t's do not.
            "stopped_early": sum(1 for t in per_trial if t["stop_decided_at"] is not None)}


def to_target(s, target):
    best = None
    for n, (ms, _, _, v) in enumerate(s["reports"], 1):
        if isinstance(v, (int, float)) and (best is None or v > best):
            best = v
        if best is not None and best >= target - 1e-12:
            return n, (ms - s["created_at"]) / 1000.0
    return None, None


def curves_agree(a, b):
    """(points compared, points that differ) between two experiments' trials of one index."""
    compared = differ = 0
    for ta, tb in zip(a["trials"], b["trials"]):
        for x, y in zip(ta["curve"], tb["curve"]):
            compared += 1
            differ += 0 if x == y else 1
    return compared, differ


def percentile(values, p):
    """numpy's (nan)percentile with linear interpolation, as Ray's ASHA computes its cutoff."""
    v = sorted(values)
    pos = p / 100.0 * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def ray_asha_check(summary, max_t, grace_period, rf):
    """Replays the experiment's results, in commit order, through Ray's ASHA arithmetic
    (one bracket: rungs grace_period * rf^k, highest first; a trial is recorded at the
    highest rung it reached and has not been recorded at, and stopped when below the
    (1 - 1/rf) percentile of those recorded there before it; results of a stopped trial
    are not seen). Returns (trials checked, [mismatches]): each trial's stop iteration and
    cutoff against the daemon's reason ("... cutoff X at training_iteration N")."""
    k = 0
    while grace_period * rf ** (k + 1) <= max_t:
        k += 1
    rungs = [(grace_period * rf ** i, {}) for i in reversed(range(k + 1))]
    stopped = {}
    for _, idx, it, val in summary["reports"]:
        if idx in stopped or not isinstance(val, (int, float)):
            continue
        if it >= max_t:
            stopped[idx] = (None, None)  # reached max_t
            continue
        for milestone, recorded in rungs:
            if it < milestone or idx in recorded:
                continue
            cutoff = percentile(list(recorded.values()), (1 - 1.0 / rf) * 100) if recorded \
                else None
            recorded[idx] = val
            if cutoff is not None and val < cutoff:
                stopped[idx] = (it, cutoff)
            break
    mismatches = []
    for t in summary["trials"]:
        sim_it, sim_cut = stopped.get(t["index"], (None, None))
        m = re.search(r"cutoff ([-0-9.e+]+)", t["reason"] or "")
        if sim_it != t["stop_decided_at"] or (
                sim_cut is not None and (not m or abs(float(m.group(1)) - sim_cut) > 1e-5)):
            mismatches.append({"trial": t["index"], "daemon": t["reason"],
                               "ray": [sim_it, sim_cut]})
    return len(summary["trials"]), mismatches


def bench_asha_fifo(d, args, digits_lib, data):
    sha = d.upload(digits_lib)
    runs = []
    for seed in args.seeds:
        fifo_spec = digits_spec(digits_lib, data, args, seed, {"type": "fifo"})
        t0 = time.monotonic()
        fifo = summarize_experiment(d, run_tune(d, fifo_spec, sha))
        log("seed %d FIFO: %d trial-epochs, best %.4f (%.0f s)" % (
            seed, fifo["epochs"], fifo["best"], time.monotonic() - t0))
        for rf in args.reduction_factors:
            sched = {"type": "asha", "time_attr": "training_iteration", "max_t": args.epochs,
                     "grace_period": args.grace_period, "reduction_factor": rf}
            t0 = time.monotonic()
            asha = summarize_experiment(d, run_tune(d, digits_spec(digits_lib, data, args, seed,
                                                                   sched), sha))
            target = min(asha["best"], fifo["best"])
            fifo_n, fifo_s = to_target(fifo, target)
            asha_n, asha_s = to_target(asha, target)
            compared, differ = curves_agree(fifo, asha)
            checked, mismatches = ray_asha_check(asha, args.epochs, args.grace_period, rf)
            # What the experiment would have spent had each stopped trial ended at its rung.
            at_rung = sum(min(t["iterations"], t["stop_decided_at"] or t["iterations"])
                          for t in asha["trials"])
            run = {"seed": seed, "grace_period": args.grace_period, "reduction_factor": rf,
                   "target": target, "fifo": dict(fifo, to_target=fifo_n, to_target_s=fifo_s),
                   "asha": dict(asha, to_target=asha_n, to_target_s=asha_s),
                   "ratio_to_target": fifo_n / asha_n, "ratio_spent": fifo["epochs"] / asha["epochs"],
                   "curve_points_compared": compared, "curve_points_differ": differ,
                   "ray_checked": checked, "ray_mismatches": mismatches,
                   "asha_epochs_at_rung": at_rung}
            runs.append(run)
            log("seed %d ASHA rf %s: %d trial-epochs (%d after a stop), best %.4f; to %.4f: "
                "FIFO %d, ASHA %d -> %.2fx (%.0f s)" % (
                    seed, rf, asha["epochs"], asha["overrun"], asha["best"], target, fifo_n,
                    asha_n, run["ratio_to_target"], time.monotonic() - t0))
    return runs


# ---------------------------------------------------------------------------------------
# (b) Overhead between trials


def tiny_trainer(lib, name, config):
    return {"name": name, "entrypoint": {"library": lib, "function": "train_loop"},
            "train_loop_config": config,
            "scaling_config": {"num_workers": 1, "resources_per_worker": {"CPU": 1}}}


def gaps(d, job_ids):
    """Per consecutive pair: prev ended_at -> next submitted, started, first report (s)."""
    jobs = [d.get_ok("/v1/jobs/" + j) for j in job_ids]
    first = [d.get_ok("/v1/jobs/%s/metrics" % j)["history"][0]["time"] for j in job_ids]
    out = []
    for i in range(1, len(jobs)):
        end = jobs[i - 1]["ended_at"]
        out.append({"gap": (first[i] - end) / 1000.0,
                    "to_submitted": (jobs[i]["submitted_at"] - end) / 1000.0,
                    "to_started": (jobs[i]["started_at"] - jobs[i]["submitted_at"]) / 1000.0,
                    "to_first_report": (first[i] - jobs[i]["started_at"]) / 1000.0})
    return out


def bench_overhead(d, args, test_lib):
    sha = d.upload(test_lib)
    base = {"epochs": 3, "sleep_ms": args.sleep_ms}
    out = {"tune": [], "cli": [], "http": []}
    work = os.path.join(d.data_dir, "peer-specs")
    os.makedirs(work, exist_ok=True)
    # Untimed warm-up: one job through the CLI (the library is stored, the page cache warm).
    warm = os.path.join(work, "warm.json")
    with open(warm, "w") as f:
        json.dump(tiny_trainer(test_lib, "warmup", base), f)
    p = d.cli("submit", warm, "--wait", timeout=600)
    if p.returncode != 0:
        raise RuntimeError("warm-up submit failed: %s %s" % (p.stdout, p.stderr))
    for rnd in range(args.rounds):
        spec = {"trainer": tiny_trainer(test_lib, "ovh%d" % rnd, base),
                "param_space": {"train_loop_config": {"loss_scale": {"uniform": [0.5, 1.5]}}},
                "tune_config": {"metric": "loss", "mode": "min",
                                "num_samples": args.overhead_trials, "max_concurrent_trials": 1,
                                "search_alg": {"type": "random", "seed": 100 + rnd}}}
        e = run_tune(d, spec, sha)
        trials = sorted(e["trials"], key=lambda t: t["index"])
        if any(len(t.get("jobs") or [t["job_id"]]) != 1 for t in trials):
            raise RuntimeError("a trial of the overhead experiment ran more than one job")
        out["tune"] += gaps(d, [t["job_id"] for t in trials])
        configs = [dict(base, **t["config"]["train_loop_config"]) for t in trials]

        # Peer 1: `traintl submit --wait`, one after the other.
        names = []
        for i, cfg in enumerate(configs):
            path = os.path.join(work, "cli%d_%d.json" % (rnd, i))
            names.append("cli%d-%d" % (rnd, i))
            with open(path, "w") as f:
                json.dump(tiny_trainer(test_lib, names[-1], cfg), f)
        for i in range(len(configs)):
            p = d.cli("submit", os.path.join(work, "cli%d_%d.json" % (rnd, i)), "--wait",
                      timeout=600)
            if p.returncode != 0:
                raise RuntimeError("traintl submit --wait: %d %s %s" % (p.returncode, p.stdout,
                                                                       p.stderr))
        out["cli"] += gaps(d, [d.get_ok("/v1/jobs/" + n)["job_id"] for n in names])

        # Peer 2: an HTTP driver polling every 10 ms.
        ids = []
        for i, cfg in enumerate(configs):
            job = tiny_trainer(test_lib, "http%d-%d" % (rnd, i), cfg)
            answer = d.post_ok("/v1/jobs", {"spec": job, "library_sha256": sha})
            ids.append(answer["job_id"])
            j = wait_job(d, ids[-1])
            if j["state"] != "SUCCEEDED":
                raise RuntimeError("job %s ended %s" % (ids[-1], j["state"]))
        out["http"] += gaps(d, ids)
        log("overhead round %d: tune median %.3f s, CLI loop %.3f s, HTTP loop %.3f s" % (
            rnd + 1, statistics.median(g["gap"] for g in out["tune"]),
            statistics.median(g["gap"] for g in out["cli"]),
            statistics.median(g["gap"] for g in out["http"])))
    return out


# ---------------------------------------------------------------------------------------
# Reporting


def git(*a):
    try:
        return subprocess.run(["git"] + list(a), cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = "%.1f GiB" % (int(f.readline().split()[1]) / 1024 / 1024)
    except (OSError, ValueError, IndexError):
        pass
    return "%s, %d CPUs (%s), %s, Linux %s" % (platform.node() or "?", os.cpu_count() or 0, cpu,
                                               mem, platform.release())


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def cfg_text(c):
    return "lr=%.3g hidden=%s" % (c["lr"], c["hidden"]) if c else "-"


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, -(-len(xs) * q // 100) - 1))]


def render(args, info, runs, ovh):
    out = []
    out.append("Measured %s on %s; load average %s before, %s after; %.0f s in all." % (
        info["date"], info["machine"], info["load0"], info["load1"], info["seconds"]))
    out.append("Daemon: %s; source tree at commit %s%s. Command: `%s`." % (
        info["traintld"], info["commit"], " + uncommitted changes" if info["dirty"] else "",
        info["command"]))
    if runs:
        out.append("")
        out.append("### (a) ASHA vs FIFO, digits MLP: %d trials x %d epochs, 2 concurrent, "
                   "1 worker each" % (args.samples, args.epochs))
        out.append("")
        rows = []
        for r in runs:
            f, a = r["fifo"], r["asha"]
            rows.append([r["seed"], "%s/%s" % (r["grace_period"], r["reduction_factor"]),
                         f["epochs"], "%d (%d after a stop)" % (a["epochs"], a["overrun"]),
                         "%.4f" % f["best"], "%.4f" % a["best"], "%.4f" % r["target"],
                         "%d (%.1f s)" % (f["to_target"], f["to_target_s"]),
                         "%d (%.1f s)" % (a["to_target"], a["to_target_s"]),
                         "**%.2fx**" % r["ratio_to_target"], "%.2fx" % r["ratio_spent"],
                         "%.1f / %.1f" % (f["wall_s"], a["wall_s"]),
                         "%d/%d" % (r["curve_points_differ"], r["curve_points_compared"])])
        out.append(table(["seed", "ASHA grace/rf", "FIFO trial-epochs", "ASHA trial-epochs",
                          "FIFO best", "ASHA best", "target", "FIFO epochs to target",
                          "ASHA epochs to target", "FIFO/ASHA to target", "FIFO/ASHA spent",
                          "wall s FIFO / ASHA", "curve points differing"], rows))
        out.append("")
        out.append("Epochs to target: the experiment's results in commit order, counted until "
                   "the best-so-far val_accuracy reaches the target (the lower of the pair's "
                   "two bests); in brackets the seconds from the experiment's creation. "
                   "Per trial, median over all experiments: job submitted -> first report "
                   "(worker start, LibTorch, data, epoch 1) %.2f s; one epoch (between two "
                   "reports) %.3f s." % (
                       statistics.median(x["startup_s"] for r in runs
                                         for x in (r["fifo"], r["asha"])),
                       statistics.median(x["epoch_s"] for r in runs
                                         for x in (r["fifo"], r["asha"]))))
        out.append("ASHA's decisions against Ray's arithmetic (the same results replayed in "
                   "commit order through a Python copy of Ray's ASHA: stop iteration and "
                   "cutoff of every trial): %d of %d trials agree%s." % (
                       sum(r["ray_checked"] - len(r["ray_mismatches"]) for r in runs),
                       sum(r["ray_checked"] for r in runs),
                       "" if not any(r["ray_mismatches"] for r in runs) else
                       " (mismatches, which results committed in the same millisecond can "
                       "cause: " + json.dumps([m for r in runs for m in r["ray_mismatches"]]) +
                       ")"))
        lat = [x for r in runs for x in r["asha"]["stop_latency_s"]]
        if lat:
            out.append("ASHA's early stops: %d trial-epochs of %d (%.0f%%) were reported after "
                       "ASHA had decided to stop their trial; from the deciding result's "
                       "commit to the trial's job ending: median %.3f s, max %.3f s (%d stops)."
                       % (sum(r["asha"]["overrun"] for r in runs),
                          sum(r["asha"]["epochs"] for r in runs),
                          100.0 * sum(r["asha"]["overrun"] for r in runs) /
                          sum(r["asha"]["epochs"] for r in runs),
                          statistics.median(lat), max(lat), len(lat)))
        out.append("")
        for rf in args.reduction_factors:
            sel = [r for r in runs if r["reduction_factor"] == rf]
            ratios = [r["ratio_to_target"] for r in sel]
            spent = [r["ratio_spent"] for r in sel]
            same_best = [r["ratio_spent"] if r["asha"]["best"] >= r["fifo"]["best"] else 0.0
                         for r in sel]
            met = sum(1 for x in ratios if x >= 3)
            out.append("ASHA grace %s rf %s over %d seeds: FIFO/ASHA trial-epochs to the target "
                       "median **%.2fx** (min %.2fx, max %.2fx; >= 3x in %d of %d); trial-epochs "
                       "spent median %.2fx (%.2fx had every stopped trial ended at its rung, as "
                       "in Ray); ASHA's best equal to FIFO's in %d of %d; trials ASHA "
                       "stopped early: %s of %d each." % (
                           args.grace_period, rf, len(sel), statistics.median(ratios),
                           min(ratios), max(ratios), met, len(sel), statistics.median(spent),
                           statistics.median(r["fifo"]["epochs"] / r["asha_epochs_at_rung"]
                                             for r in sel),
                           sum(1 for r in sel if r["asha"]["best"] >= r["fifo"]["best"]),
                           len(sel), "/".join(str(r["asha"]["stopped_early"]) for r in sel),
                           args.samples))
            out.append("Target: trial-epochs spent in all with FIFO's best reached, FIFO/ASHA "
                       "median over seeds (0x where ASHA's best is lower) **%.2fx** (%s): "
                       "**%s** (>= 3x). Stricter, trial-epochs to the target: median %.2fx: "
                       "%s." % (statistics.median(same_best),
                                " / ".join("%.2fx" % x for x in same_best),
                                "met" if statistics.median(same_best) >= 3 else "NOT met",
                                statistics.median(ratios),
                                "also >= 3x" if statistics.median(ratios) >= 3 else "below 3x"))
            out.append("")
        out.append("Best configs (FIFO / ASHA): " + "; ".join(
            "seed %d rf %s: %s %.4f / %s %.4f" % (r["seed"], r["reduction_factor"],
                                               cfg_text(r["fifo"]["best_config"]), r["fifo"]["best"],
                                               cfg_text(r["asha"]["best_config"]), r["asha"]["best"])
            for r in runs) + ".")
    if ovh:
        out.append("")
        out.append("### (b) Trial end -> next trial's first report (tiny trainer, "
                   "max_concurrent_trials 1, sleep_ms %d, %d trials x %d rounds)" % (
                       args.sleep_ms, args.overhead_trials, args.rounds))
        out.append("")
        rows = []
        for key, label in (("tune", "traintl tune (FIFO, max_concurrent_trials 1)"),
                           ("cli", "peer: `traintl submit --wait` loop"),
                           ("http", "peer: HTTP driver polling every 10 ms")):
            g = ovh[key]
            rows.append([label, len(g), "**%.3f**" % statistics.median(x["gap"] for x in g),
                         "%.3f" % pct([x["gap"] for x in g], 90),
                         "%.3f / %.3f" % (min(x["gap"] for x in g), max(x["gap"] for x in g)),
                         "%.3f" % statistics.median(x["to_submitted"] for x in g),
                         "%.3f" % statistics.median(x["to_started"] for x in g),
                         "%.3f" % statistics.median(x["to_first_report"] for x in g)])
        out.append(table(["driver", "gaps", "median s", "p90 s", "min / max s",
                          "end -> next submitted (median)", "submitted -> started",
                          "started -> first report"], rows))
        med = statistics.median(x["gap"] for x in ovh["tune"])
        out.append("")
        out.append("tune median / CLI loop median: %.2f; tune median / HTTP loop median: %.2f. "
                   "Target (tune median <= 0.5 s): **%s** (%.3f s)." % (
                       med / statistics.median(x["gap"] for x in ovh["cli"]),
                       med / statistics.median(x["gap"] for x in ovh["http"]),
                       "met" if med <= 0.5 else "NOT met", med))
    return "\n".join(out) + "\n"


def write_results(text):
    head = ("# bench/tune results\n\nHow and what: the docstring of bench/tune/run.py and "
            "bench/README.md's tune section.\n\n")
    tail = ""
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            old = f.read()
        if BEGIN in old and END in old:
            head = old[:old.index(BEGIN)]
            tail = old[old.index(END) + len(END):]
    with open(RESULTS, "w") as f:
        f.write(head + BEGIN + "\n" + text + END + tail)


def find_data(build):
    for p in (os.path.join(build, "digits-data", "digits.csv"), "/tmp/traintl-digits/digits.csv"):
        if os.path.isfile(p) and os.path.getsize(p) > 0:
            return p
    out = os.path.join(build, "digits-data")
    subprocess.run([os.path.join(ROOT, "examples", "digits", "fetch_data.sh"), out], check=True)
    return os.path.join(out, "digits.csv")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seeds", default="1,2,3,4,5", help="search_alg seeds, one pair each")
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--grace-period", type=int, default=1)
    ap.add_argument("--reduction-factors", default="3",
                    help="one ASHA experiment per value, per seed")
    ap.add_argument("--overhead-trials", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2, help="overhead rounds")
    ap.add_argument("--sleep-ms", type=int, default=20)
    ap.add_argument("--measures", default="a,b")
    ap.add_argument("--keep", action="store_true", help="keep the daemon's temporary dir")
    ap.add_argument("--no-results", action="store_true", help="do not rewrite RESULTS.md")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    args.reduction_factors = [int(x) if float(x).is_integer() else float(x)
                              for x in args.reduction_factors.split(",") if x]
    measures = set(args.measures.split(","))

    digits_lib = os.path.join(args.build, "examples", "libdigits_train.so")
    test_lib = os.path.join(args.build, "tests", "e2e", "libs", "libtest_train.so")
    for p in [os.path.join(args.build, "bin", b) for b in ("traintld", "traintl",
                                                           "traintl-worker")] + \
            ([digits_lib] if "a" in measures else []) + ([test_lib] if "b" in measures else []):
        if not os.path.exists(p):
            sys.exit("missing %s (ninja -C %s traintld traintl traintl-worker digits_train "
                     "test_train)" % (p, args.build))
    data = find_data(args.build) if "a" in measures else None

    traintld = os.path.join(args.build, "bin", "traintld")
    with open(traintld, "rb") as f:
        traintld_sha = hashlib.sha256(f.read()).hexdigest()[:12]
    info = {"traintld": "%s, sha256 %s, built %s" % (
                traintld, traintld_sha,
                datetime.datetime.fromtimestamp(os.path.getmtime(traintld)).strftime(
                    "%Y-%m-%d %H:%M")),
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "machine": machine(),
            "load0": "%.2f / %.2f / %.2f" % os.getloadavg(), "build": args.build,
            "commit": git("rev-parse", "--short", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
            "command": " ".join(["/usr/bin/python3", "bench/tune/run.py"] + sys.argv[1:])}
    t0 = time.monotonic()
    d = Daemon(os.path.join(args.build, "bin"), num_cpus=2,
               data_dir=tempfile.mkdtemp(prefix="bench-tune-"), request_timeout=60)
    runs, ovh = [], None
    try:
        d.start()
        log("traintld at %s, data dir %s" % (d.address, d.data_dir))
        if "a" in measures:
            runs = bench_asha_fifo(d, args, digits_lib, data)
        if "b" in measures:
            ovh = bench_overhead(d, args, test_lib)
    except BaseException:
        log("daemon log tail:\n" + d.log_tail())
        raise
    finally:
        d.stop(keep=args.keep)
        if args.keep:
            log("kept", d.data_dir)
    info["seconds"] = time.monotonic() - t0
    info["load1"] = "%.2f / %.2f / %.2f" % os.getloadavg()
    text = render(args, info, runs, ovh)
    print(text)
    with open(RAW, "w") as f:
        json.dump({"info": info, "args": vars(args), "asha_fifo": runs, "overhead": ovh}, f,
                  indent=1)
    if not args.no_results:
        write_results(text)
        log("wrote", RESULTS)


if __name__ == "__main__":
    main()
