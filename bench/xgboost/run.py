#!/usr/bin/python3
"""bench/xgboost: traintl's XGBoost jobs against XGBoost's own Python launch, side by side.

    /usr/bin/python3 bench/xgboost/run.py [--rounds 5] [--build /work/main/build]

The training is examples/xgboost (binary:logistic, hist, max_depth 3, eta 0.1, seed 0, eval
metrics logloss and error on the training and validation sets, one thread per rank, 2
ranks, each training on its half of the rows) on the breast cancer data of
examples/xgboost/fetch_data.sh. The sides:

- traintl: a warm traintld (started once, idle between runs; the example's library
  <build>/examples/libxgboost_train.so already stored after the warm-up run, so `traintl
  submit` hashes it, HEADs it and posts the job), examples/xgboost/job.json as it is but for
  the data URIs, the library's path and, in measure 2, num_boost_round (and, for one
  variant, checkpoint_every).
- Python: bench/xgboost/py_driver.py starts xgboost.tracker.RabitTracker and 2 processes of
  bench/xgboost/py_worker.py (Debian's python3-xgboost 1.7.4 on /usr/bin/python3), each
  joining through xgboost.collective.CommunicatorContext with the tracker's environment,
  loading the same rows as traintl's dataset shard of its rank and calling xgboost.train
  with the same parameters and evals.

Two measures, each run in every round for every variant, in an order that rotates from
round to round so that load drifting on a shared machine hits every side alike; medians
and traintl / Python ratios (of the medians, and the median of the per-round ratios):

 1. Submit -> first boosting round done (the example's data, 456 + 113 rows, 50 rounds):
    from just before `traintl submit` / the driver is started to the end of round 0 on
    rank 0 (traintl: the timestamp of the round's eval line in rank 0's log, written by
    the worker process with ms resolution; Python: time.time() in a callback after
    XGBoost's EvaluationMonitor, i.e. at the same point). Target: traintl <= 0.5x.
 2. Rounds/s: --boost-rounds rounds on the data replicated --replicate times (every row of
    train.csv and valid.csv repeated identically on both sides), timed inside the training
    from the end of round 0 to the end of the last round ((rounds - 1) / seconds; traintl:
    the per-round log timestamps; Python: the callback), so startup and data loading are
    not included. traintl runs twice: the job as shipped (a checkpoint every 10 rounds)
    and with checkpoint_every 0 (a checkpoint only after the last round, what Ray's
    XGBoostTrainer does by default); Python twice: as in measure 1 (verbose_eval 1) and
    without the per-round eval line (XGBoost still evaluates both sets every round; only
    the print is skipped: rank 0 sends each line to the Python tracker over a new TCP
    connection and waits for the tracker's handshake). Target: traintl >= 1.0x against
    the first. The final eval metrics of every run are compared.

Everything runs on 127.0.0.1 under one temporary directory; traintld, traintl,
traintl-worker and the library are copied there first (the library still loads
libtraintl_xgboost.so through its RUNPATH, from the build dir). Every process started here
(the daemon and its workers, the Python drivers and their workers) is ended when the run
ends, also on failure or Ctrl-C. Rewrites bench/xgboost/RESULTS.md (unless --no-results).
Python 3 stdlib only; the Python peer needs python3-xgboost (and numpy) on /usr/bin/python3.
"""
import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench", "startup"))
from benchlib import Daemon, pids_under  # noqa: E402

EXAMPLE = os.path.join(REPO, "examples", "xgboost")
XGB_PYTHON = "/usr/bin/python3"  # Debian's python3-xgboost; not a pyenv/venv python3
RESULTS = os.path.join(HERE, "RESULTS.md")

T10, T0, PY, PYQ = "traintl", "traintl-ckpt-end", "python", "python-no-print"
LABEL = {T10: "traintl (job.json as shipped: checkpoint every 10 rounds)",
         T0: "traintl, checkpoint_every 0 (only after the last round)",
         PY: "Python: RabitTracker + 2 xgboost.train processes",
         PYQ: "Python, without the per-round eval line"}
METRICS = ("train-logloss", "train-error", "validation-logloss", "validation-error")


def log(msg):
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def wait_for(pred, timeout, what, interval=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}")


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def log_time(line):
    """The wall-clock time of a traintl log line ("2026-12-03T03:27:53.342Z I ...")."""
    stamp = datetime.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.replace(tzinfo=datetime.timezone.utc).timestamp()


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


# ---- processes -----------------------------------------------------------------------------

def kill_all_under(root):
    """Ends every process under root: the daemon and its traintl-workers, the Python
    drivers and their workers (their --out is under root)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = pids_under(root)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        try:
            wait_for(lambda: not pids_under(root), 5, "processes to end", interval=0.05)
            return
        except RuntimeError:
            pass


def cpu_of(pid):
    """(own, reaped children's) CPU seconds of a process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    # after the ")": state is fields[0]; utime, stime, cutime, cstime are stat's 14-17
    return ((int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick)


# ---- the bench -----------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.root = tempfile.mkdtemp(prefix="traintl-bench-xgboost-")
        self.prefix = os.path.join(self.root, "prefix")
        self.daemon = None
        self.drivers = []
        self.n = 0

    # -- setup

    def copy_build(self):
        build = self.args.build
        os.makedirs(os.path.join(self.prefix, "bin"))
        os.makedirs(os.path.join(self.prefix, "lib"))
        for b in ("traintld", "traintl", "traintl-worker"):
            shutil.copy2(os.path.join(build, "bin", b), os.path.join(self.prefix, "bin", b))
        src = os.path.join(build, "examples", "libxgboost_train.so")
        if not os.path.exists(src):
            raise RuntimeError(f"{src} does not exist: build the xgboost_train target")
        self.library = os.path.join(self.prefix, "lib", "libxgboost_train.so")
        shutil.copy2(src, self.library)

    def make_data(self):
        """The example's data (fetch_data.sh), and each replicated size."""
        d = os.path.join(self.root, "data")
        p = subprocess.run([os.path.join(EXAMPLE, "fetch_data.sh"), d], capture_output=True,
                           text=True, timeout=300)
        if p.returncode != 0:
            raise RuntimeError(f"fetch_data.sh: {p.returncode}\n{p.stdout}{p.stderr}")
        self.data = {1: (os.path.join(d, "train.csv"), os.path.join(d, "valid.csv"))}
        for k in self.args.replicate:
            if k == 1:
                continue
            paths = []
            for name in ("train", "valid"):
                with open(os.path.join(d, f"{name}.csv")) as f:
                    lines = f.readlines()
                path = os.path.join(d, f"{name}_x{k}.csv")
                with open(path, "w") as f:
                    f.write(lines[0])
                    for _ in range(k):
                        f.writelines(lines[1:])
                paths.append(path)
            self.data[k] = tuple(paths)
        self.rows = {}
        for k, (train, valid) in self.data.items():
            with open(train) as f:
                nt = sum(1 for _ in f) - 1
            with open(valid) as f:
                nv = sum(1 for _ in f) - 1
            self.rows[k] = (nt, nv)

    def setup(self):
        self.copy_build()
        self.make_data()
        with open(os.path.join(EXAMPLE, "job.json")) as f:
            self.job_json = json.load(f)
        self.daemon = Daemon(os.path.join(self.prefix, "bin"), num_cpus=None,
                             data_dir=os.path.join(self.root, "daemon"))
        self.daemon.start()
        log(f"traintld up at {self.daemon.address} (data dir {self.daemon.data_dir})")

    def cleanup(self):
        for p in self.drivers:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait()
        if self.daemon is not None:
            # Its data dir goes with root below, once every process under root has ended.
            self.daemon.stop(keep=True)
        kill_all_under(self.root)
        if self.args.keep:
            log(f"kept {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)

    def out_dir(self, tag):
        self.n += 1
        d = os.path.join(self.root, "out", f"{self.n:03d}-{tag}")
        os.makedirs(d)
        return d

    # -- the two sides

    def spec(self, name, k, rounds, checkpoint_every=None):
        """examples/xgboost/job.json with this run's name, library, data and rounds."""
        spec = json.loads(json.dumps(self.job_json))
        spec["name"] = name
        spec["entrypoint"]["library"] = self.library
        train, valid = self.data[k]
        spec["datasets"]["train"]["uri"] = "file://" + train
        spec["datasets"]["valid"]["uri"] = "file://" + valid
        spec["train_loop_config"]["num_boost_round"] = rounds
        if checkpoint_every is not None:
            spec["train_loop_config"]["checkpoint_every"] = checkpoint_every
        path = os.path.join(self.root, "specs", f"{name}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(spec, f, indent=1)
        return path

    def run_traintl(self, tag, k, rounds, checkpoint_every=None):
        name = f"{tag}-{self.n}"
        self.n += 1
        spec_path = self.spec(name, k, rounds, checkpoint_every)
        cpu0 = cpu_of(self.daemon.proc.pid)
        t0 = time.time()
        p = self.daemon.cli("submit", spec_path, timeout=120)
        t_cli = time.time()
        if p.returncode != 0:
            raise RuntimeError(f"traintl submit {spec_path}: {p.returncode}\n{p.stdout}{p.stderr}")
        job_id = p.stdout.strip().split()[-1]
        job = self.daemon.wait_end(job_id, timeout=300)
        cpu1 = cpu_of(self.daemon.proc.pid)
        if job["state"] != "SUCCEEDED":
            raise RuntimeError(f"job {job_id} {job['state']}: {job.get('message')}\n"
                               + json.dumps(job.get("attempts"), indent=1)
                               + "\n" + self.daemon.log(4000))
        logs = self.daemon.cli("logs", job_id, "--rank", "0", timeout=60,
                               check=True).stdout.splitlines()
        rounds_t = {}
        joining = joined = None
        for line in logs:
            if not line[:4].isdigit():
                continue  # XGBoost's own "[04:25:40] task 0 got new rank 0" on stderr
            body = line.split("] ", 1)[1] if "] " in line else ""
            if body.startswith("[") and "]\t" in body:
                rounds_t[int(body[1:body.index("]")])] = log_time(line)
            elif "joining the XGBoost collective" in body:
                joining = log_time(line)
            elif body.startswith("traintl::xgboost: XGBoost rank"):
                joined = log_time(line)
        if sorted(rounds_t) != list(range(rounds)):
            raise RuntimeError(f"job {job_id}: rank 0's log has eval lines for "
                               f"{len(rounds_t)} of {rounds} rounds")
        started = [log_time(l) for l in self.daemon.log_lines(job_id) if "started worker" in l]
        _, m = self.daemon.get(f"/v1/jobs/{job_id}/metrics")
        hist = m.get("history", [])
        return {"job": job_id, "t0": t0, "cli": t_cli - t0,
                "attempt": job["started_at"] / 1000 - t0,
                "forked": max(started) - t0 if started else None,
                "entered": joining - t0 if joining else None,
                "joined": joined - t0 if joined else None,
                "first_round": rounds_t[0] - t0,
                "first_report": hist[0]["time"] / 1000 - t0 if hist else None,
                "rounds_t": [rounds_t[i] - t0 for i in range(rounds)],
                "final": {k2: job.get("metrics", {}).get(k2) for k2 in METRICS},
                "reports": len(hist),
                "cpu_daemon": cpu1[0] - cpu0[0], "cpu_workers": cpu1[1] - cpu0[1],
                "ended": job["ended_at"] / 1000 - t0}

    def run_python(self, tag, k, rounds, no_print=False):
        out = self.out_dir(tag)
        train, valid = self.data[k]
        cfg = self.job_json["train_loop_config"]
        cmd = [XGB_PYTHON, os.path.join(HERE, "py_driver.py"), "--workers", "2", "--out", out,
               "--", "--train", train, "--valid", valid, "--rounds", str(rounds),
               "--max-depth", str(cfg.get("max_depth", 3)), "--eta", str(cfg.get("eta", 0.1)),
               "--seed", str(cfg.get("seed", 0))] + (["--no-print"] if no_print else [])
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(os.path.join(out, "driver.log"), "wb") as logf:
            t0 = time.time()
            p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            self.drivers.append(p)
            try:
                rc = p.wait(300)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                raise RuntimeError(f"the Python driver did not end in 300 s ({out})")
        t_end = time.time()
        self.drivers.remove(p)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        left = pids_under(out)
        if left:
            raise RuntimeError(f"the Python run left processes behind: {left}")
        r0 = read_json(os.path.join(out, "rank0.json"))
        drv = read_json(os.path.join(out, "driver.json"))
        end = read_json(os.path.join(out, "driver_end.json"))
        if rc != 0 or not r0 or not drv or not end:
            tail = ""
            for f in sorted(os.listdir(out)):
                if f.endswith(".log"):
                    with open(os.path.join(out, f), errors="replace") as fh:
                        tail += f"---- {f}\n" + fh.read()[-3000:]
            raise RuntimeError(f"the Python driver exited {rc}\n{tail}")
        if len(r0["rounds"]) != rounds:
            raise RuntimeError(f"Python: {len(r0['rounds'])} rounds stamped, not {rounds}")
        s = r0["stamps"]
        return {"t0": t0, "driver_start": drv["start"] - t0,
                "driver_imported": drv["imported"] - t0, "tracker": drv["tracker"] - t0,
                "forked": drv["spawned"] - t0, "entered": s["start"] - t0,
                "imported": s["imported"] - t0, "joined": s["joined"] - t0,
                "data": s["data"] - t0, "first_round": r0["rounds"][0] - t0,
                "rounds_t": [t - t0 for t in r0["rounds"]], "final": r0["final"],
                "rows": r0["rows"], "total_rows": r0["total_rows"],
                "cpu_driver": end["cpu_self"], "cpu_workers": end["cpu_workers"],
                "cpu_all": (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime),
                "ended": t_end - t0}

    # -- measure 1: submit -> first round done

    def m1(self, variant):
        rounds = self.job_json["train_loop_config"].get("num_boost_round", 50)
        if variant == PY:
            return self.run_python("m1", 1, rounds)
        return self.run_traintl("m1", 1, rounds)

    # -- measure 2: rounds/s

    def m2(self, variant, k):
        rounds = self.args.boost_rounds
        if variant in (PY, PYQ):
            r = self.run_python(f"m2x{k}", k, rounds, no_print=variant == PYQ)
        else:
            r = self.run_traintl(f"m2x{k}", k, rounds, 0 if variant == T0 else None)
        t = r["rounds_t"]
        r["rounds_per_s"] = (len(t) - 1) / (t[-1] - t[0])
        iv = [b - a for a, b in zip(t, t[1:])]
        # The interval after round i (0-based) holds round i's report; with a checkpoint
        # every c rounds the rounds i with (i + 1) % c == 0 attach one.
        every = self.job_json["train_loop_config"].get("checkpoint_every", 10)
        if variant == T10 and every > 0:
            ck = [d for i, d in enumerate(iv) if (i + 1) % every == 0]
            other = [d for i, d in enumerate(iv) if (i + 1) % every != 0]
            r["ms_ckpt_round"] = mean(ck) * 1000
            r["ms_other_round"] = mean(other) * 1000
        r["ms_round"] = mean(iv) * 1000
        r["ms_round_median"] = median(iv) * 1000
        del r["rounds_t"]
        return r

    # -- the rounds

    def measures(self):
        """(key, function, variants) in the order they run."""
        out = []
        if "m1" in self.args.measures:
            out.append(("m1", self.m1, [T10, PY]))
        if "m2" in self.args.measures:
            for k in self.args.replicate:
                out.append((f"m2x{k}", lambda v, k=k: self.m2(v, k), [T10, T0, PY, PYQ]))
        return out

    def round(self, i, results):
        for key, fn, variants in self.measures():
            order = variants[i % len(variants):] + variants[:i % len(variants)]
            for v in order:
                time.sleep(self.args.settle)
                r = fn(v)
                if key == "m1":
                    r.pop("rounds_t", None)
                results[key][v].append(r)
            field, unit = ("first_round", "s") if key == "m1" else ("rounds_per_s", "rounds/s")
            log(f"round {i + 1} {key}: " + ", ".join(
                f"{v} {results[key][v][-1][field]:.3f} {unit}" for v in order))


# ---- RESULTS.md ----------------------------------------------------------------------------

def git(*args, cwd=REPO):
    try:
        return subprocess.run(["git", "-C", cwd] + list(args), capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def build_source(build):
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return ""


def machine():
    mem = ""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1048576:.1f} GiB RAM"
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count()
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.node()}: {cpus} CPU cores ({model}), {mem}, Linux {platform.release()}"


def python_versions():
    try:
        return subprocess.run(
            [XGB_PYTHON, "-c", "import platform, xgboost, numpy; print(platform.python_version(),"
             " xgboost.__version__, numpy.__version__)"],
            capture_output=True, text=True, timeout=60).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return ["?", "?", "?"]


def fmt(x, nd=3):
    return "-" if x is None else f"{x:.{nd}f}"


def col_median(rs, key):
    xs = [r[key] for r in rs if r.get(key) is not None]
    return median(xs) if xs else None


def ratios(results, key, v, field, ref=PY):
    xs = [r[field] for r in results[key][v]]
    py = [r[field] for r in results[key][ref]]
    return median(xs), median(xs) / median(py), median([a / b for a, b in zip(xs, py)])


def report(bench, results, meta):
    a = bench.args
    cfg = bench.job_json["train_loop_config"]
    L = []
    L.append("# bench/xgboost results: traintl's XGBoost jobs vs XGBoost's own Python launch\n")
    L.append(f"Written by `bench/xgboost/run.py` (see bench/README.md, section bench/xgboost). "
             f"Run {meta['date']}, {meta['elapsed']:.0f} s in all.\n")
    L.append(f"- Machine: {meta['machine']}; load average {meta['load0']} at the start, "
             f"{meta['load1']} at the end (other work may have shared the cores).")
    L.append(f"- traintl: binaries and `examples/libxgboost_train.so` of `{a.build}` "
             f"({meta['build_mtime']}), built from {meta['build_src']} (its HEAD when the run "
             f"started: `{meta['build_commit']}`{meta['build_dirty']}); bench at commit "
             f"`{meta['bench_commit']}` (branch {meta['bench_branch']}).")
    L.append(f"- Python peer: Debian's python3-xgboost {meta['xgboost']} (numpy "
             f"{meta['numpy']}) on {XGB_PYTHON} (Python {meta['python']}).")
    L.append(f"- Command: `{meta['argv']}`")
    L.append(f"- {a.rounds} rounds after {a.warmup} untimed warm-up run(s) of every variant; in "
             f"each round every measure runs each variant once, in an order that rotates by one "
             f"from round to round ({a.settle} s apart, each after the previous run's processes "
             f"are gone). One warm daemon for the whole run; the library was uploaded by the "
             f"warm-up, so every timed `traintl submit` found it stored (HEAD 200).")
    L.append(f"- Training (both sides): objective binary:logistic, tree_method hist, max_depth "
             f"{cfg.get('max_depth', 3)}, eta {cfg.get('eta', 0.1)}, seed {cfg.get('seed', 0)}, "
             f"eval_metric logloss then error, evals train and validation, 2 ranks, "
             f"OMP_NUM_THREADS=1 (one XGBoost thread per rank), every round's eval line "
             f"printed by rank 0. Data: examples/xgboost/fetch_data.sh "
             f"({bench.rows[1][0]} training rows split 2 ways, {bench.rows[1][1]} validation "
             f"rows on every rank).\n")

    L.append("## Summary\n")
    L.append("| measure | variant | median | traintl / Python (of medians) | median of per-round ratios | target | met |")
    L.append("|---|---|---|---|---|---|---|")
    rows = []
    if "m1" in a.measures:
        rows.append(("m1", "first_round", False, "1. submit -> first boosting round done",
                     "s", "<= 0.5x", [T10, PY]))
    if "m2" in a.measures:
        for k in a.replicate:
            nt, nv = bench.rows[k]
            rows.append((f"m2x{k}", "rounds_per_s", True,
                         f"2. rounds/s, {a.boost_rounds} rounds, data x{k} ({nt} + {nv} rows)",
                         "rounds/s", ">= 1.0x", [T10, T0, PY]))
    for key, field, hb, title, unit, target, variants in rows:
        for v in variants:
            med, ratio, paired = ratios(results, key, v, field)
            if v == PY:
                L.append(f"| {title} | {LABEL[v]} | {med:.3f} {unit} | 1 | 1 | | |")
                continue
            lim = float(target.split()[1].rstrip("x"))
            ok = (lambda r: r >= lim) if hb else (lambda r: r <= lim)
            met = ("yes" if ok(ratio) and ok(paired) else "**no**" if not ok(ratio) and
                   not ok(paired) else "yes by the medians, not by the per-round ratios"
                   if ok(ratio) else "no by the medians, yes by the per-round ratios")
            L.append(f"| {title} | {LABEL[v]} | {med:.3f} {unit} | **{ratio:.2f}x** | "
                     f"{paired:.2f}x | {target} | {met} |")
    L.append("")

    if "m1" in a.measures:
        rounds = cfg.get("num_boost_round", 50)
        L.append("## 1. Submit -> first boosting round done (2 ranks)\n")
        L.append(f"The example's data and job ({rounds} rounds; the runs go on to the end, only "
                 "the first round is timed). The clock starts just before `traintl submit "
                 "job.json` (the CLI process, no `--wait`) or the Python driver is started, and "
                 "stops when rank 0 has finished round 0: trained the first tree, evaluated "
                 "both sets and written the eval line.")
        L.append("- traintl: the timestamp of round 0's eval line in rank 0's log (`traintl logs "
                 "JOB --rank 0`; the worker process stamps each line when it writes it, ms "
                 "resolution). The job's first reported metrics (committed by the head, column "
                 "\"first report committed\") come a little later; the log line is the earlier "
                 "and more precise point, and the same one as Python's.")
        L.append("- Python: `py_driver.py` (imports xgboost.tracker, which imports the whole "
                 "xgboost package, starts RabitTracker, spawns 2 `py_worker.py`), each worker "
                 "imports xgboost (and numpy), joins the collective, loads its rows "
                 "(np.loadtxt) and the validation rows, trains; rank 0's callback after "
                 "XGBoost's EvaluationMonitor stamps time.time() after round 0.")
        L.append("")
        L.append("| variant | median s | min | max | traintl / Python | median of per-round ratios |")
        L.append("|---|---|---|---|---|---|")
        for v in (T10, PY):
            xs = [r["first_round"] for r in results["m1"][v]]
            med, ratio, paired = ratios(results, "m1", v, "first_round")
            rt = "1" if v == PY else f"**{ratio:.2f}x**"
            pr = "1" if v == PY else f"{paired:.2f}x"
            L.append(f"| {LABEL[v]} | {med:.3f} | {min(xs):.3f} | {max(xs):.3f} | {rt} | {pr} |")
        L.append("\nWhere the time goes, traintl (medians, seconds since `traintl submit` "
                 "started):\n")
        L.append("| CLI returned | attempt started | 2nd worker forked | rank 0 in the entry point | collective joined | round 0 done | first report committed |")
        L.append("|---|---|---|---|---|---|---|")
        rs = results["m1"][T10]
        L.append("| " + " | ".join(fmt(col_median(rs, c)) for c in (
            "cli", "attempt", "forked", "entered", "joined", "first_round", "first_report"))
            + " |")
        L.append("\n\"attempt started\": the job's `started_at` (ms); \"worker forked\": "
                 "traintld's \"started worker\" log line (ms); \"in the entry point\": rank 0's "
                 "first log line (\"joining the XGBoost collective\", the library and "
                 "libxgboost loaded); \"collective joined\": its \"XGBoost rank 0 of 2\" line. "
                 "Between that and round 0 both ranks read their datasets (FromShard, train "
                 "then valid) and train and evaluate round 0.\n")
        L.append("Where the time goes, Python (medians, seconds since the driver was started; "
                 "rank 0's stamps):\n")
        L.append("| driver's first line | tracker imported | tracker listening | workers spawned | worker's first line | xgboost imported | collective joined | data loaded (DMatrix x2) | round 0 done |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        rs = results["m1"][PY]
        L.append("| " + " | ".join(fmt(col_median(rs, c)) for c in (
            "driver_start", "driver_imported", "tracker", "forked", "entered", "imported",
            "joined", "data", "first_round")) + " |")
        L.append("\nPer round (s): " + "; ".join(
            f"{v}: " + ", ".join(f"{r['first_round']:.3f}" for r in results['m1'][v])
            for v in (T10, PY)))
        L.append("")

    if "m2" in a.measures:
        L.append("## 2. Boosting rounds per second (2 ranks)\n")
        L.append(f"{a.boost_rounds} rounds; timed inside the training from the end of round 0 "
                 f"to the end of the last round: ({a.boost_rounds} - 1) / seconds. traintl: "
                 f"the timestamps (ms) of rank 0's per-round eval lines in its log; Python: rank "
                 f"0's callback. Startup and data loading are not included; what is included "
                 f"is everything each side does per round: XGBoost's update and evaluation, the "
                 f"eval line, and for traintl the per-round `report()` of the metrics (every "
                 f"round, on every rank, committed by the head) and the checkpoints (the model "
                 f"serialized to a temp dir by rank 0 and reported with it; the head copies it "
                 f"into storage and keeps {bench.job_json['run_config']['checkpoint_config'].get('num_to_keep')}). "
                 f"Python without the eval line: `verbose_eval` off (no EvaluationMonitor); "
                 f"XGBoost still evaluates both sets every round (the callback container does it "
                 f"for the history), only the print is skipped, which with XGBoost's launch "
                 f"goes from rank 0 to the tracker over a new TCP connection per line "
                 f"(rabit's TrackerPrint; the tracker's Python thread accepts it, answers the "
                 f"handshake and prints). "
                 f"The data: train.csv and valid.csv with every row repeated the stated number "
                 f"of times (the same files on both sides; each rank trains on its contiguous "
                 f"half of the training rows and evaluates all validation rows).")
        L.append("")
        for k in a.replicate:
            nt, nv = bench.rows[k]
            key = f"m2x{k}"
            L.append(f"### Data x{k}: {nt} training rows ({nt // 2} per rank), {nv} validation rows\n")
            L.append("| variant | median rounds/s | min | max | traintl / Python | median of per-round ratios | traintl / Python without the print (medians) | ms per round (mean) | CPU s: launcher / daemon | CPU s: workers |")
            L.append("|---|---|---|---|---|---|---|---|---|---|")
            for v in (T10, T0, PY, PYQ):
                rs = results[key][v]
                xs = [r["rounds_per_s"] for r in rs]
                med, ratio, paired = ratios(results, key, v, "rounds_per_s")
                rq = ratios(results, key, v, "rounds_per_s", PYQ)[1]
                rt = "1" if v == PY else f"**{ratio:.2f}x**" if v in (T10, T0) else f"{ratio:.2f}x"
                pr = "1" if v == PY else f"{paired:.2f}x"
                qr = "1" if v == PYQ else f"{rq:.2f}x"
                cpu_l = col_median(rs, "cpu_driver" if v in (PY, PYQ) else "cpu_daemon")
                L.append(f"| {LABEL[v]} | {med:.1f} | {min(xs):.1f} | {max(xs):.1f} | {rt} | "
                         f"{pr} | {qr} | {fmt(col_median(rs, 'ms_round'), 2)} | {fmt(cpu_l, 2)} | "
                         f"{fmt(col_median(rs, 'cpu_workers'), 2)} |")
            rs = results[key][T10]
            every = cfg.get("checkpoint_every", 10)
            L.append(f"\nThe job as shipped, per interval (medians over the runs of the mean "
                     f"interval): {fmt(col_median(rs, 'ms_other_round'), 2)} ms after a round "
                     f"without a checkpoint, {fmt(col_median(rs, 'ms_ckpt_round'), 2)} ms after "
                     f"each {every}th round (which reports a checkpoint). CPU seconds are of "
                     f"the whole run (startup and loading included): traintl's daemon "
                     f"(traintld's own, from /proc, while the job ran) and its workers (reaped "
                     f"children of traintld); Python's driver (the tracker included) and its "
                     f"workers (reaped children).")
            L.append("\nPer round (rounds/s): " + "; ".join(
                f"{v}: " + ", ".join(f"{r['rounds_per_s']:.1f}" for r in results[key][v])
                for v in (T10, T0, PY, PYQ)))
            L.append("")
            L.append("Final eval metrics (the last run of each variant):\n")
            L.append("| variant | " + " | ".join(METRICS) + " |")
            L.append("|---|" + "---|" * len(METRICS))
            for v in (T10, T0, PY, PYQ):
                fin = results[key][v][-1]["final"]
                L.append(f"| {LABEL[v]} | " + " | ".join(
                    "-" if fin.get(m) is None else f"{fin[m]:.10g}" for m in METRICS) + " |")
            diffs = []
            for v in (T10, T0):
                for r_t in results[key][v]:
                    for r_p in results[key][PY] + results[key][PYQ]:
                        for m in METRICS:
                            if r_t["final"].get(m) is not None and r_p["final"].get(m) is not None:
                                diffs.append(abs(r_t["final"][m] - r_p["final"][m]))
            L.append(f"\nLargest difference between a traintl and a Python final metric over "
                     f"all runs: {max(diffs) if diffs else float('nan'):.3g}.")
            L.append("")
    if meta.get("notes"):
        L.append("## Notes\n")
        L.append(meta["notes"])
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds of the bench")
    ap.add_argument("--build", default=os.path.join(REPO, "build"),
                    help="traintl build dir (bin/traintld, bin/traintl, bin/traintl-worker, "
                         "examples/libxgboost_train.so)")
    ap.add_argument("--measures", default="m1,m2", help="comma-separated subset of m1,m2")
    ap.add_argument("--boost-rounds", type=int, default=500, help="measure 2: boosting rounds")
    ap.add_argument("--replicate", default="1,100",
                    help="measure 2: comma-separated data sizes, as copies of every row")
    ap.add_argument("--settle", type=float, default=0.5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each variant")
    ap.add_argument("--no-results", action="store_true", help="do not rewrite RESULTS.md")
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument("--raw", default=os.path.join(tempfile.gettempdir(),
                                                  "bench-xgboost-last_run.json"),
                    help="where every sample goes, as JSON")
    ap.add_argument("--notes", default="", help="a file whose text ends RESULTS.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    args.measures = [m.strip() for m in args.measures.split(",") if m.strip()]
    args.replicate = [int(k) for k in args.replicate.split(",") if k.strip()]

    bench = Bench(args)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    src = build_source(args.build) or REPO
    src_commit = git("rev-parse", "--short", "HEAD", cwd=src)
    src_dirty = " (with uncommitted changes)" if git(
        "status", "--porcelain", "--untracked-files=no", cwd=src) else ""
    load0 = "%.2f / %.2f / %.2f" % os.getloadavg()
    results = {}
    try:
        bench.setup()
        for key, _, variants in bench.measures():
            results[key] = {v: [] for v in variants}
        for _ in range(args.warmup):
            log("warm-up (untimed): each variant of each measure once")
            for key, fn, variants in bench.measures():
                for v in variants:
                    fn(v)
        for i in range(args.rounds):
            bench.round(i, results)
    except BaseException:
        if bench.daemon is not None:
            sys.stderr.write("---- traintld log (tail) ----\n" + bench.daemon.log(12000) + "\n")
        raise
    finally:
        bench.cleanup()
    elapsed = time.monotonic() - started

    for key, field in [("m1", "first_round")] + [(f"m2x{k}", "rounds_per_s")
                                                 for k in args.replicate]:
        if key not in results:
            continue
        print(f"{key} medians: " + ", ".join(
            f"{v} {ratios(results, key, v, field)[0]:.3f}"
            + ("" if v == PY else f" ({ratios(results, key, v, field)[1]:.2f}x)")
            for v in results[key]))
    py, xgbv, npv = (python_versions() + ["?", "?", "?"])[:3]
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"), "elapsed": elapsed,
        "machine": machine(), "load0": load0,
        "load1": "%.2f / %.2f / %.2f" % os.getloadavg(),
        "build_mtime": "traintld built " + time.strftime(
            "%Y-%m-%d %H:%M", time.gmtime(os.path.getmtime(
                os.path.join(args.build, "bin", "traintld")))) + " UTC, the library " +
            time.strftime("%Y-%m-%d %H:%M", time.gmtime(os.path.getmtime(
                os.path.join(args.build, "examples", "libxgboost_train.so")))) + " UTC",
        "build_src": src, "build_commit": src_commit, "build_dirty": src_dirty,
        "bench_commit": git("rev-parse", "--short", "HEAD"),
        "bench_branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "python": py, "xgboost": xgbv, "numpy": npv,
        "argv": "/usr/bin/python3 bench/xgboost/run.py " + " ".join(sys.argv[1:]),
    }
    if args.notes:
        with open(args.notes) as f:
            meta["notes"] = f.read().strip()
    text = report(bench, results, meta)
    if not args.no_results:
        with open(args.results, "w") as f:
            f.write(text)
        log(f"wrote {args.results}")
    with open(args.raw, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1, default=str)
    log(f"raw samples: {args.raw}")
    print(text)


if __name__ == "__main__":
    main()
