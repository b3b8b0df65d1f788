#!/usr/bin/python3
"""bench/python: traintl's Python and command entry points against torchrun, side by side.

    /usr/bin/python3 bench/python/run.py [--rounds 5] [--build /work/main/build]

Three measures, each run in every round for every variant, in an order that rotates from
round to round so that load drifting on a shared machine hits every side alike; medians and
traintl / torchrun ratios (of the medians, and the median of the per-round ratios):

 1. DDP steps/s: bench/ddp/train_ddp.py (MLP 784-512-512-10, batch 64 per rank, 2 ranks,
    Gloo, one intra-op thread), timed inside the script after 10 warm-up steps. Variants:
    torchrun; traintl's command entry point running the unmodified script; traintl's
    Python entry point running ddp_fn.py:train_fn, the same loop as a function.
 2. Submit -> every rank in its training code with the process group ready: from just
    before `traintl submit` (a warm daemon: started before, idle, the working_dir already
    stored) or torchrun is started, to the later rank's time.time() (startup_script.py /
    startup_fn.py; see there).
 3. Recovery: rank 1's training process SIGKILLed after the first checkpoint ->
    first training step done after loading the checkpoint in the new attempt / restart
    (recover_script.py / recover_fn.py; torchrun --max_restarts 3 --monitor_interval 0.1,
    traintl failure_config.max_failures 3).

The Python entry variants run when the build has the Python entry shim
(<build>/lib/traintl/libtraintl_python.so) unless --python-entry off. Everything runs on
127.0.0.1 under one temporary directory; the binaries are copied there first (so that a
rebuild of --build during the run cannot change them under it). Every process started here
(the daemon and its workers, torchrun and its ranks) is ended when the run ends, also on
failure or Ctrl-C. Rewrites bench/python/RESULTS.md (unless --no-results). Python 3
stdlib only; torch is needed by the ranks (Debian's python3-torch, /usr/bin/python3).
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench", "startup"))
from benchlib import TERMINAL, Daemon, pids_under  # noqa: E402

DDP_DIR = os.path.join(REPO, "bench", "ddp")
TORCHRUN = os.path.join(DDP_DIR, "torchrun_py311.py")
TORCH_PYTHON = "/usr/bin/python3"  # Debian's python3-torch; not a pyenv/venv python3
RESULTS = os.path.join(HERE, "RESULTS.md")

T_CMD, T_PY, TR = "traintl-cmd", "traintl-py", "torchrun"
LABEL = {T_CMD: "traintl, command entry point", T_PY: "traintl, Python entry point",
         TR: "torchrun (Debian torch 1.13)"}


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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def log_time(line):
    """The wall-clock time of a traintld log line ("2026-12-03T03:27:53.342Z I ...")."""
    stamp = datetime.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.replace(tzinfo=datetime.timezone.utc).timestamp()


def median(xs):
    return statistics.median(xs) if xs else float("nan")


# ---- processes -----------------------------------------------------------------------------

def kill_all_under(root):
    """Ends every process under root: the daemon, its traintl-workers, their command
    children (cwd in the daemon's working dir cache), torchrun and its ranks (their script
    is under root)."""
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


def warm_pool(daemon):
    """{pid: CPU ticks} of the warm workers waiting (children of the daemon started with
    --warm that are not running a rank yet)."""
    out = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[0] == "Z" or int(fields[1]) != daemon.proc.pid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"\0--warm\0" not in f.read():
                    continue
            out[int(entry)] = int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            continue
    return out


def wait_warm_pool(daemon, count, timeout=120):
    """All `count` warm workers started and done loading (their CPU time stands still): a
    run then shares the CPUs with nothing of the daemon's refilling."""
    if count == 0:
        return
    last = {}

    def ready():
        nonlocal last
        now = warm_pool(daemon)
        done = len(now) == count and now == last
        last = now
        return done
    wait_for(ready, timeout, f"{count} idle warm workers", interval=0.3)


def rank_env():
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    return env


class Torchrun:
    """torchrun (bench/ddp/torchrun_py311.py: /usr/bin/torchrun plus the Python 3.11 fix)
    with 2 ranks on 127.0.0.1, in its own session so that its whole tree can be ended."""

    def __init__(self, script, args, extra=()):
        self.cmd = [TORCH_PYTHON, TORCHRUN, "--nproc_per_node", "2", "--master_addr",
                    "127.0.0.1", "--master_port", str(free_port())] + list(extra) + \
                   [script] + [str(a) for a in args]
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     env=rank_env())
        return self

    def wait(self, timeout=180):
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"torchrun did not end in {timeout}s")
        out = out.decode(errors="replace")
        if self.proc.returncode != 0:
            raise RuntimeError(f"torchrun exited {self.proc.returncode}:\n{out[-6000:]}")
        return out

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()


# ---- the bench -----------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        self.args = args
        self.root = tempfile.mkdtemp(prefix="traintl-bench-python-")
        self.prefix = os.path.join(self.root, "prefix")
        self.daemon = None
        self.torchruns = []
        self.py_entry = False
        self.n = 0

    # -- setup

    def copy_build(self):
        build = self.args.build
        os.makedirs(os.path.join(self.prefix, "bin"))
        for b in ("traintld", "traintl", "traintl-worker"):
            shutil.copy2(os.path.join(build, "bin", b), os.path.join(self.prefix, "bin", b))
        shim = os.path.join(build, "lib", "traintl", "libtraintl_python.so")
        if os.path.exists(shim) and self.args.python_entry != "off":
            shutil.copytree(os.path.join(build, "lib", "traintl"),
                            os.path.join(self.prefix, "lib", "traintl"), symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
            self.py_entry = True
        elif self.args.python_entry == "on":
            raise RuntimeError(f"--python-entry on, but {shim} does not exist")

    def working_dir(self, name, files):
        """A working_dir holding only `files` (from bench/python or bench/ddp)."""
        d = os.path.join(self.root, "wd", name)
        os.makedirs(d)
        for f in files:
            src = os.path.join(HERE, f)
            if not os.path.exists(src):
                src = os.path.join(DDP_DIR, f)
            shutil.copy2(src, os.path.join(d, f))
        return d

    def out_dir(self, tag):
        self.n += 1
        d = os.path.join(self.root, "out", f"{self.n:03d}-{tag}")
        os.makedirs(d)
        return d

    def spec(self, name, wd, entry, config=None, max_failures=0):
        if isinstance(entry, list):
            ep = {"command": entry, "working_dir": wd}
        else:
            ep = {"python": entry, "working_dir": wd}
        spec = {"name": name, "entrypoint": ep, "train_loop_config": config or {},
                "scaling_config": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
                "run_config": {"failure_config": {"max_failures": max_failures}},
                "env": {"OMP_NUM_THREADS": "1"}}
        path = os.path.join(self.root, "specs", f"{name}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(spec, f, indent=1)
        return path

    def submit(self, spec_path):
        """(job id, start time, CLI exit time): `traintl submit` without --wait."""
        t0 = time.time()
        p = self.daemon.cli("submit", spec_path, timeout=120)
        t_cli = time.time()
        if p.returncode != 0:
            raise RuntimeError(f"traintl submit {spec_path}: {p.returncode}\n{p.stdout}{p.stderr}")
        return p.stdout.strip().split()[-1], t0, t_cli

    def check_job(self, job, want="SUCCEEDED"):
        if job["state"] != want:
            raise RuntimeError(f"job {job['job_id']} {job['state']}: {job.get('message')}\n"
                               + json.dumps(job.get("attempts"), indent=1)
                               + "\n" + self.daemon.log(4000))

    def torchrun(self, script, args, extra=()):
        t = Torchrun(script, args, extra)
        self.torchruns.append(t)
        return t

    def setup(self):
        self.copy_build()
        self.wd_ddp = self.working_dir("ddp", ["train_ddp.py", "ddp_fn.py"])
        self.wd_start = self.working_dir("startup", ["startup_script.py", "startup_fn.py",
                                                     "stamps.py"])
        self.wd_rec = self.working_dir("recover", ["recover_script.py", "recover_fn.py",
                                                   "recover_common.py", "stamps.py"])
        self.daemon = Daemon(os.path.join(self.prefix, "bin"), num_cpus=None,
                             extra_args=["--warm-workers", str(self.args.warm_workers)],
                             data_dir=os.path.join(self.root, "daemon"))
        self.daemon.start()
        log(f"traintld up at {self.daemon.address} (data dir {self.daemon.data_dir}, "
            f"{self.args.warm_workers} warm workers); "
            f"Python entry point: {'yes' if self.py_entry else 'no (shim not built)'}")
        self.variants = [T_CMD] + ([T_PY] if self.py_entry else []) + [TR]

    def cleanup(self):
        for t in self.torchruns:
            t.kill()
        if self.daemon is not None:
            # Its data dir goes with root below, once every process under root has ended.
            self.daemon.stop(keep=True)
        kill_all_under(self.root)
        if self.args.keep:
            log(f"kept {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- measure 1: steps/s

    def m1(self, variant):
        steps = self.args.steps
        if variant == TR:
            out = self.torchrun(os.path.join(self.wd_ddp, "train_ddp.py"), [steps, 64]).start().wait()
            line = [l for l in out.splitlines() if "steps_per_s" in l]
            return {"steps_per_s": float(line[-1].split()[1])}
        if variant == T_CMD:
            spec = self.spec(f"m1-cmd-{self.n}", self.wd_ddp,
                             [TORCH_PYTHON, "train_ddp.py", str(steps), "64"])
        else:
            spec = self.spec(f"m1-py-{self.n}", self.wd_ddp, "ddp_fn:train_fn",
                             {"steps": steps, "batch": 64})
        self.n += 1
        job_id, _, _ = self.submit(spec)
        # The script times itself: polling the daemon 20 times a second would only take CPU
        # from the ranks (torchrun's run is waited for without any).
        job = self.daemon.wait_end(job_id, interval=1.0)
        self.check_job(job)
        logs = self.daemon.cli("logs", job_id, "--rank", "0", timeout=60, check=True).stdout
        line = [l for l in logs.splitlines() if l.startswith("steps_per_s")]
        r = {"steps_per_s": float(line[-1].split()[1])}
        if variant == T_PY:
            r["reported"] = job.get("metrics", {}).get("steps_per_s")
        return r

    # -- measure 2: submit -> every rank in the training function

    def m2(self, variant):
        out = self.out_dir(f"m2-{variant}")
        ranks = lambda: [read_json(os.path.join(out, f"rank{r}.json")) for r in range(2)]  # noqa
        if variant == TR:
            tr = self.torchrun(os.path.join(self.wd_start, "startup_script.py"), [out])
            t0 = time.time()
            tr.start()
            tr.wait()
            s = ranks()
            if None in s:
                raise RuntimeError("torchrun ended without both ranks' stamps")
            res = {"t0": t0}
        else:
            if variant == T_CMD:
                spec = self.spec(f"m2-cmd-{self.n}", self.wd_start,
                                 [TORCH_PYTHON, "startup_script.py", out])
            else:
                spec = self.spec(f"m2-py-{self.n}", self.wd_start, "startup_fn:train_fn",
                                 {"out": out})
            job_id, t0, t_cli = self.submit(spec)
            job = self.daemon.wait_end(job_id)
            self.check_job(job)
            s = ranks()
            if None in s:
                raise RuntimeError(f"job {job_id} ended without both ranks' stamps")
            res = {"t0": t0, "cli": t_cli - t0, "attempt": job["started_at"] / 1000 - t0,
                   "job": job_id}
            started = [l for l in self.daemon.log_lines(job_id) if "started worker" in l]
            res["log_workers"] = started
        t0 = res["t0"]
        # The rendezvous: from the later rank's `import torch` done to the later rank in the
        # function (for the Python entry point also importing traintl.train.torch).
        res["pg_wait"] = max(x["in_fn"] for x in s) - max(x["imported"] for x in s)
        res["in_fn"] = max(x["in_fn"] for x in s) - t0
        res["imported"] = max(x["imported"] for x in s) - t0
        res["first_line"] = max(x["first_line"] for x in s) - t0
        res["proc"] = max(x["proc_start"] for x in s) - t0
        # The rank's process as the launcher sees it: torchrun's and the Python entry's
        # ranks are the processes themselves; a command rank is the traintl-worker, the
        # parent of the Python process.
        res["rank_proc"] = max(x["parent_start" if variant == T_CMD else "proc_start"]
                               for x in s) - t0
        return res

    # -- measure 3: SIGKILL rank 1 -> first step after loading the checkpoint

    def m3(self, variant):
        out = self.out_dir(f"m3-{variant}")
        ckpt = os.path.join(out, "ckpt")
        os.makedirs(ckpt)
        a = self.args
        if variant == TR:
            tr = self.torchrun(os.path.join(self.wd_rec, "recover_script.py"),
                               [out, ckpt, a.rec_steps, a.every, a.after],
                               ["--max_restarts", "3", "--monitor_interval", "0.1"]).start()
            alive = lambda: tr.proc.poll() is None  # noqa
        else:
            if variant == T_CMD:
                spec = self.spec(f"m3-cmd-{self.n}", self.wd_rec,
                                 [TORCH_PYTHON, "recover_script.py", out, ckpt,
                                  str(a.rec_steps), str(a.every), str(a.after)],
                                 max_failures=3)
            else:
                spec = self.spec(f"m3-py-{self.n}", self.wd_rec, "recover_fn:train_fn",
                                 {"out": out, "steps": a.rec_steps, "every": a.every,
                                  "after": a.after}, max_failures=3)
            job_id, _, _ = self.submit(spec)
            alive = lambda: self.daemon.job(job_id)["state"] not in TERMINAL  # noqa
        marker = wait_for(lambda: read_json(os.path.join(out, "marker.json")) or
                          (None if alive() else {"dead": True}), 120,
                          "rank 1's first checkpoint")
        if marker.get("dead"):
            raise RuntimeError(f"{variant}: the job ended before its first checkpoint")
        if variant != TR:
            # The kill comes after the checkpoint is committed (in the state store), as
            # torchrun's comes after its file is renamed into place.
            wait_for(lambda: self.daemon.job(job_id).get("latest_checkpoint") or
                     variant == T_CMD, 60, "the first checkpoint to be committed")
        t_kill = time.time()
        os.kill(marker["pid"], signal.SIGKILL)
        resumed = lambda: [read_json(os.path.join(out, f"resumed.r{r}.a1.json"))  # noqa
                           for r in range(2)]
        if variant == TR:
            tr.wait()
        else:
            job = self.daemon.wait_end(job_id)
            self.check_job(job)
        s = resumed()
        if None in s:
            raise RuntimeError(f"{variant}: no resumed stamps for restart 1 in {out}: "
                               f"{os.listdir(out)}")
        loaded = {x["loaded_step"] for x in s}
        if None in loaded:
            raise RuntimeError(f"{variant}: the restart did not load a checkpoint")
        res = {"total": max(x["first_step"] for x in s) - t_kill,
               "pg_wait": max(x["pg_ready"] for x in s) - max(x["imported"] for x in s),
               "loaded_step": min(loaded), "marker_step": marker["step"],
               "proc": max(x["proc_start"] for x in s) - t_kill,
               "first_line": max(x["first_line"] for x in s) - t_kill,
               "imported": max(x["imported"] for x in s) - t_kill,
               "pg_ready": max(x["pg_ready"] for x in s) - t_kill,
               "loaded": max(x["loaded"] for x in s) - t_kill}
        if variant == T_CMD:
            res["rank_proc"] = max(x["parent_start"] for x in s) - t_kill
        else:
            res["rank_proc"] = res["proc"]
        if variant != TR:
            att = {x["attempt"]: x for x in job["attempts"]}
            res["failed"] = att[1]["ended_at"] / 1000 - t_kill
            res["attempt2"] = att[2]["started_at"] / 1000 - t_kill
            res["how"] = (f"rank {att[1].get('failed_rank')} "
                          f"signal {att[1].get('signal')} exit {att[1].get('exit_code')}")
            res["job"] = job_id
            res["log"] = self.daemon.log_lines(job_id)
            for line in res["log"]:
                # "<ISO time> I [node] worker exited job=J attempt=1 rank=R pid=P code=C"
                if "worker exited" in line and " attempt=1 " in line:
                    rank = line.split(" rank=")[1].split()[0]
                    res[f"exit_r{rank}"] = log_time(line) - t_kill
        return res

    # -- the rounds

    def round(self, i, results):
        order = self.variants[i % len(self.variants):] + self.variants[:i % len(self.variants)]
        for m, fn in (("m1", self.m1), ("m2", self.m2), ("m3", self.m3)):
            if m not in self.args.measures:
                continue
            for v in order:
                wait_warm_pool(self.daemon, self.args.warm_workers)
                time.sleep(self.args.settle)
                r = fn(v)
                results[m][v].append(r)
            key = {"m1": "steps_per_s", "m2": "in_fn", "m3": "total"}[m]
            unit = {"m1": "steps/s", "m2": "s", "m3": "s"}[m]
            log(f"round {i + 1} {m}: " + ", ".join(
                f"{v} {results[m][v][-1][key]:.3f} {unit}" for v in order))


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


def torch_version():
    try:
        return subprocess.run([TORCH_PYTHON, "-c", "import torch; print(torch.__version__)"],
                              capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def fmt(x, nd=3):
    return "-" if x is None else f"{x:.{nd}f}"


def summarize(results, variants, m, key, higher_better):
    """Rows: variant, median, min, max, median/torchrun, median of per-round ratios."""
    rows = []
    tr = [r[key] for r in results[m][TR]]
    for v in variants:
        xs = [r[key] for r in results[m][v]]
        if not xs:
            continue
        med = median(xs)
        if v == TR:
            ratio, paired = "1", "1"
        else:
            ratio = f"**{med / median(tr):.2f}x**"
            paired = f"{median([a / b for a, b in zip(xs, tr)]):.2f}x"
        rows.append((v, med, min(xs), max(xs), ratio, paired))
    return rows


def col_median(rs, key):
    xs = [r[key] for r in rs if r.get(key) is not None]
    return median(xs) if xs else None


def report(bench, results, meta):
    a = bench.args
    variants = bench.variants
    L = []
    L.append("# bench/python results: traintl's Python and command entry points vs torchrun\n")
    L.append(f"Written by `bench/python/run.py` (see bench/README.md, section bench/python). "
             f"Run {meta['date']}, {meta['elapsed']:.0f} s in all.\n")
    L.append(f"- Machine: {meta['machine']}; load average {meta['load0']} at the start, "
             f"{meta['load1']} at the end (other work may have shared the 2 cores).")
    L.append(f"- traintl: binaries of `{a.build}` ({meta['build_mtime']}), built from "
             f"{meta['build_src']} (its HEAD when the run started: `{meta['build_commit']}`"
             f"{meta['build_dirty']}); "
             f"bench at commit `{meta['bench_commit']}` (branch {meta['bench_branch']}).")
    L.append(f"- torchrun: Debian's python3-torch {meta['torch']} on {TORCH_PYTHON} "
             f"(Python {meta['python']}), through bench/ddp/torchrun_py311.py.")
    L.append("- Python entry point: "
             + ("measured." if bench.py_entry else
                "**not measured** (the build had no lib/traintl/libtraintl_python.so)."))
    L.append(f"- Command: `{meta['argv']}`")
    L.append(f"- {a.rounds} rounds; in each, every measure runs each variant once, in an order "
             f"that rotates by one from round to round ({a.settle} s apart, each after the "
             f"previous run's processes are gone"
             + (f" and the daemon's {a.warm_workers} warm workers are started and idle: the "
                f"pool refills only while no rank runs"
                if a.warm_workers else "") + "). One warm daemon for the whole run.\n")

    L.append("## Summary\n")
    L.append("| measure | variant | median | traintl / torchrun (of medians) | median of per-round ratios | target | met |")
    L.append("|---|---|---|---|---|---|---|")
    specs = [("m1", "steps_per_s", True, "1. DDP steps/s", "steps/s", ">= 0.98x"),
             ("m2", "in_fn", False, "2. submit -> every rank in its training function",
              "s", "<= 0.5x"),
             ("m3", "total", False, "3. SIGKILL rank 1 -> first step after loading the "
              "checkpoint", "s", "<= 0.6x")]
    for m, key, hb, title, unit, target in specs:
        if m not in a.measures:
            continue
        tr = median([r[key] for r in results[m][TR]])
        for v in variants:
            xs = [r[key] for r in results[m][v]]
            med = median(xs)
            if v == TR:
                L.append(f"| {title} | {LABEL[v]} | {med:.3f} {unit} | 1 | 1 | | |")
                continue
            ratio = med / tr
            paired = median([x / y for x, y in zip(xs, [r[key] for r in results[m][TR]])])
            lim = float(target.split()[1].rstrip("x"))
            ok = (lambda r: r >= lim) if hb else (lambda r: r <= lim)
            met = ("yes" if ok(ratio) and ok(paired) else "**no**" if not ok(ratio) and
                   not ok(paired) else "yes by the medians, not by the per-round ratios"
                   if ok(ratio) else "no by the medians, yes by the per-round ratios")
            L.append(f"| {title} | {LABEL[v]} | {med:.3f} {unit} | **{ratio:.2f}x** | "
                     f"{paired:.2f}x | {target} | {met} |")
    L.append("")

    if "m1" in a.measures:
        L.append("## 1. DDP training steps/s\n")
        L.append(f"bench/ddp/train_ddp.py: MLP 784-512-512-10, batch 64 per rank, 2 ranks, "
                 f"Gloo, SGD (0.05, momentum 0.9), `torch.set_num_threads(1)`, "
                 f"`OMP_NUM_THREADS=1`; {a.steps} steps timed inside the script after 10 "
                 f"warm-up steps (launch and rendezvous not included); rank 0's figure.")
        L.append("- torchrun: `/usr/bin/python3 bench/ddp/torchrun_py311.py --nproc_per_node 2 "
                 f"--master_addr 127.0.0.1 --master_port <free> train_ddp.py {a.steps} 64`.")
        L.append(f"- traintl command: `\"entrypoint\": {{\"command\": [\"/usr/bin/python3\", "
                 f"\"train_ddp.py\", \"{a.steps}\", \"64\"], \"working_dir\": <dir>}}`, the "
                 f"unmodified script; steps/s read from rank 0's log (`traintl logs JOB --rank 0`).")
        if bench.py_entry:
            L.append("- traintl Python: `\"entrypoint\": {\"python\": \"ddp_fn:train_fn\", "
                     "\"working_dir\": <dir>}`: the same loop body as a train_fn(config); "
                     "`train.torch.prepare_model(model)` = DDP with DDP's defaults; the "
                     "process group set up by traintl; steps/s printed and reported "
                     "(`train.report`).")
        L.append("")
        L.append("| variant | median steps/s | min | max | traintl / torchrun | median of per-round ratios |")
        L.append("|---|---|---|---|---|---|")
        for v, med, lo, hi, ratio, paired in summarize(results, variants, "m1",
                                                       "steps_per_s", True):
            L.append(f"| {LABEL[v]} | {med:.2f} | {lo:.2f} | {hi:.2f} | {ratio} | {paired} |")
        L.append("\nPer round (steps/s): " + "; ".join(
            f"{v}: " + ", ".join(f"{r['steps_per_s']:.2f}" for r in results['m1'][v])
            for v in variants))
        if bench.py_entry:
            rep = [r.get("reported") for r in results["m1"][T_PY]]
            L.append(f"\nThe Python entry's steps/s as reported through `train.report` "
                     f"(the job's metrics): {', '.join(fmt(x, 2) for x in rep)}.")
        L.append("")

    if "m2" in a.measures:
        L.append("## 2. Submit -> every rank in its training function (2 ranks)\n")
        L.append("The clock starts just before `traintl submit job.json` (the CLI process; "
                 "no `--wait`) or torchrun is started, and stops at the later of the two "
                 "ranks' `time.time()` taken as the first statement of the training code, "
                 "with the Gloo process group ready on every side:")
        L.append("- torchrun: `torchrun_py311.py --nproc_per_node 2 --master_addr 127.0.0.1 "
                 "--master_port <free> startup_script.py OUT`: torchrun's Python starts and "
                 "imports torch, forks the ranks, each imports torch, `main()` calls "
                 "`dist.init_process_group(\"gloo\")` (env://), then takes the time.")
        L.append("- traintl command: a warm daemon (started once, idle; the working_dir "
                 "already stored, so the CLI packs and hashes it, HEADs it and posts the "
                 "job), `[\"/usr/bin/python3\", \"startup_script.py\", OUT]`: the same script; "
                 "the time includes the CLI, the daemon's scheduling, the traintl-worker "
                 "starting the command, Python's start, `import torch` and the rendezvous.")
        if bench.py_entry:
            L.append("- traintl Python: the same warm daemon, `\"python\": \"startup_fn:train_fn\"`: "
                     "the worker embeds Python, imports the module (which imports torch), "
                     "sets up the gloo process group from the job's rendezvous, calls "
                     "train_fn, whose first statement takes the time.")
        L.append("")
        L.append("| variant | median s | min | max | traintl / torchrun | median of per-round ratios |")
        L.append("|---|---|---|---|---|---|")
        for v, med, lo, hi, ratio, paired in summarize(results, variants, "m2", "in_fn", False):
            L.append(f"| {LABEL[v]} | {med:.3f} | {lo:.3f} | {hi:.3f} | {ratio} | {paired} |")
        L.append("\nWhere the time goes (medians, seconds since the launch, later rank):\n")
        L.append("| variant | CLI returned | attempt started | rank process forked | Python process forked | module's first line | torch imported | in the function (pg ready) |")
        L.append("|---|---|---|---|---|---|---|---|")
        for v in variants:
            rs = results["m2"][v]
            L.append(f"| {LABEL[v]} | {fmt(col_median(rs, 'cli'))} | "
                     f"{fmt(col_median(rs, 'attempt'))} | {fmt(col_median(rs, 'rank_proc'))} | "
                     f"{fmt(col_median(rs, 'proc'))} | {fmt(col_median(rs, 'first_line'))} | "
                     f"{fmt(col_median(rs, 'imported'))} | {fmt(col_median(rs, 'in_fn'))} |")
        L.append("\nThe same as durations (medians of each run's differences, later rank):\n")
        L.append("| variant | launch -> Python process forked | -> module's first line (Python start) | -> torch imported | -> in the function (rendezvous) | rendezvous waits > 0.5 s |")
        L.append("|---|---|---|---|---|---|")
        for v in variants:
            rs = results["m2"][v]
            d = lambda a, b: fmt(median([r[b] - (r[a] if a else 0) for r in rs]))  # noqa
            slow = sum(1 for r in rs if r["pg_wait"] > 0.5)
            L.append(f"| {LABEL[v]} | {d(None, 'proc')} | {d('proc', 'first_line')} | "
                     f"{d('first_line', 'imported')} | {d('imported', 'in_fn')} | "
                     f"{slow} of {len(rs)} |")
        L.append("\n\"rendezvous waits > 0.5 s\": runs in which more than 0.5 s passed "
                 "between the later rank's `import torch` and the later rank in the function "
                 "(torch 1.13's TCPStore client "
                 "retries a refused connect once per second: a rank that asks before rank "
                 "0's store listens waits until the next whole second; torchrun's agent "
                 "hosts the store before it starts the ranks, so its ranks never wait).")
        L.append("\n\"rank process\": the traintl-worker (traintl) or the rank's Python "
                 "(torchrun); \"Python process\": the process running the script (for the "
                 "command entry point the worker's child; for the Python entry point the "
                 "worker itself); both from /proc (10 ms resolution). \"attempt started\": "
                 "the job's `started_at` (ms).")
        L.append("\nPer round (s): " + "; ".join(
            f"{v}: " + ", ".join(f"{r['in_fn']:.3f}" for r in results['m2'][v])
            for v in variants))
        L.append("")

    if "m3" in a.measures:
        L.append("## 3. Recovery: SIGKILL of rank 1 -> first step after loading the checkpoint\n")
        L.append(f"A DDP job (train_ddp.py's model, data and step) checkpoints every {a.every} "
                 f"steps (model + optimizer + step, `torch.save`); after the first checkpoint "
                 f"(step {a.every}) rank 1 writes its pid, and the driver SIGKILLs rank 1's "
                 f"training process (the clock starts just before `kill`). The clock stops "
                 f"when the later rank of the new attempt / restart has loaded the checkpoint "
                 f"and completed its first training step (a timestamp file written by the "
                 f"script; the resumed step is checked to be the checkpoint's). The first run "
                 f"would train {a.rec_steps} steps; the restarted one trains {a.after} and "
                 f"exits.")
        L.append("- torchrun: `torchrun_py311.py --nproc_per_node 2 --max_restarts 3 "
                 "--monitor_interval 0.1 ... recover_script.py`: rank 0 writes ckpt.pt into a "
                 "shared directory (tmp + rename) and all ranks pass a barrier; a restart "
                 "(TORCHELASTIC_RESTART_COUNT > 0) `torch.load`s it. Killed: rank 1's Python "
                 "process.")
        L.append("- traintl command: the same script as a command entry point, "
                 "`\"failure_config\": {\"max_failures\": 3}` (traintl sets "
                 "TORCHELASTIC_RESTART_COUNT = attempt - 1); killed: rank 1's Python process "
                 "(the traintl-worker's child). The daemon runs with its default "
                 "`--worker-stop-grace-ms` (3000).")
        if bench.py_entry:
            L.append("- traintl Python: `recover_fn:train_fn`: rank 0 reports each checkpoint "
                     "with `train.report(metrics, checkpoint=train.Checkpoint.from_directory(d))` "
                     "(the others report the metrics), the next attempt resumes from "
                     "`train.get_checkpoint().as_directory()`; the kill comes once the "
                     "checkpoint is committed (the job's latest_checkpoint is set). Killed: rank "
                     "1's traintl-worker (it runs the Python function itself).")
        L.append("")
        L.append("| variant | median s | min | max | traintl / torchrun | median of per-round ratios |")
        L.append("|---|---|---|---|---|---|")
        for v, med, lo, hi, ratio, paired in summarize(results, variants, "m3", "total", False):
            L.append(f"| {LABEL[v]} | {med:.3f} | {lo:.3f} | {hi:.3f} | {ratio} | {paired} |")
        L.append("\nWhere the time goes (medians, seconds since the kill, later rank):\n")
        L.append("| variant | rank 1's worker exited | rank 0's worker exited | attempt 1 ended | attempt 2 started | rank process forked | Python process forked | module's first line | torch imported | pg ready | checkpoint loaded | first step done |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for v in variants:
            rs = results["m3"][v]
            L.append(f"| {LABEL[v]} | {fmt(col_median(rs, 'exit_r1'))} | "
                     f"{fmt(col_median(rs, 'exit_r0'))} | {fmt(col_median(rs, 'failed'))} | "
                     f"{fmt(col_median(rs, 'attempt2'))} | {fmt(col_median(rs, 'rank_proc'))} | "
                     f"{fmt(col_median(rs, 'proc'))} | {fmt(col_median(rs, 'first_line'))} | "
                     f"{fmt(col_median(rs, 'imported'))} | {fmt(col_median(rs, 'pg_ready'))} | "
                     f"{fmt(col_median(rs, 'loaded'))} | {fmt(col_median(rs, 'total'))} |")
        L.append("\nThe same as durations (medians of each run's differences, later rank):\n")
        L.append("| variant | kill -> new Python process forked | -> module's first line | -> torch imported | -> pg ready (rendezvous) | -> checkpoint loaded | -> first step done | rendezvous waits > 0.5 s |")
        L.append("|---|---|---|---|---|---|---|---|")
        for v in variants:
            rs = results["m3"][v]
            d = lambda a, b: fmt(median([r[b] - (r[a] if a else 0) for r in rs]))  # noqa
            slow = sum(1 for r in rs if r["pg_wait"] > 0.5)
            L.append(f"| {LABEL[v]} | {d(None, 'proc')} | {d('proc', 'first_line')} | "
                     f"{d('first_line', 'imported')} | {d('imported', 'pg_ready')} | "
                     f"{d('pg_ready', 'loaded')} | {d('loaded', 'total')} | {slow} of {len(rs)} |")
        L.append("\n\"worker exited\": traintld's log (ms); \"attempt 1 ended\" / \"attempt 2 "
                 "started\": the job's attempt records (ms); \"pg ready\": after `dist.init_process_group` (script) / on entry to "
                 "train_fn (Python entry point: traintl set the group up).")
        L.append("\nPer round (s): " + "; ".join(
            f"{v}: " + ", ".join(f"{r['total']:.3f}" for r in results['m3'][v])
            for v in variants))
        how = sorted({r["how"] for v in variants if v != TR for r in results["m3"][v]})
        L.append(f"\nHow traintl recorded the failed attempts: {'; '.join(how)}.")
        L.append("")
    if meta.get("notes"):
        L.append("## Notes\n")
        L.append(meta["notes"])
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--build", default=os.path.join(REPO, "build"),
                    help="traintl build dir (bin/traintld, bin/traintl, bin/traintl-worker, "
                         "lib/traintl/ for the Python entry point)")
    ap.add_argument("--measures", default="m1,m2,m3", help="comma-separated subset of m1,m2,m3")
    ap.add_argument("--python-entry", choices=("auto", "on", "off"), default="auto")
    ap.add_argument("--steps", type=int, default=300, help="measure 1: timed steps")
    ap.add_argument("--every", type=int, default=20, help="measure 3: checkpoint interval")
    ap.add_argument("--rec-steps", type=int, default=3000,
                    help="measure 3: steps of the first run (never reached: it is killed)")
    ap.add_argument("--after", type=int, default=5, help="measure 3: steps after resuming")
    ap.add_argument("--warm-workers", type=int, default=0,
                    help="traintld --warm-workers (workers started ahead with torch imported)")
    ap.add_argument("--settle", type=float, default=0.5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each variant")
    ap.add_argument("--no-results", action="store_true", help="do not rewrite RESULTS.md")
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument("--raw", default=os.path.join(tempfile.gettempdir(),
                                                  "bench-python-last_run.json"),
                    help="where every sample goes, as JSON")
    ap.add_argument("--notes", default="", help="a file whose text ends RESULTS.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    args.measures = [m.strip() for m in args.measures.split(",") if m.strip()]

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
    results = {m: {} for m in ("m1", "m2", "m3")}
    try:
        bench.setup()
        for m in results:
            results[m] = {v: [] for v in bench.variants}
        for _ in range(args.warmup):
            log("warm-up (untimed): each variant of each measure once")
            for m, fn in (("m1", bench.m1), ("m2", bench.m2), ("m3", bench.m3)):
                if m in args.measures:
                    for v in bench.variants:
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

    for m, key in (("m1", "steps_per_s"), ("m2", "in_fn"), ("m3", "total")):
        if m not in args.measures:
            continue
        tr = median([r[key] for r in results[m][TR]])
        print(f"{m} medians: " + ", ".join(
            f"{v} {median([r[key] for r in results[m][v]]):.3f}"
            + ("" if v == TR else f" ({median([r[key] for r in results[m][v]]) / tr:.2f}x)")
            for v in bench.variants))
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"), "elapsed": elapsed,
        "machine": machine(), "load0": load0,
        "load1": "%.2f / %.2f / %.2f" % os.getloadavg(),
        "build_mtime": "traintld built " + time.strftime(
            "%Y-%m-%d %H:%M", time.gmtime(os.path.getmtime(
                os.path.join(args.build, "bin", "traintld")))) + " UTC",
        "build_src": src, "build_commit": src_commit, "build_dirty": src_dirty,
        "bench_commit": git("rev-parse", "--short", "HEAD") + (
            " + uncommitted changes to bench/python" if git(
                "status", "--porcelain", "--untracked-files=no", "--",
                "bench/python") else ""),
        "bench_branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "torch": torch_version(), "python": subprocess.run(
            [TORCH_PYTHON, "-c", "import platform; print(platform.python_version())"],
            capture_output=True, text=True).stdout.strip(),
        "argv": "/usr/bin/python3 bench/python/run.py " + " ".join(sys.argv[1:]),
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
    log(f"raw samples (with traintld's log lines of each recovery job): {args.raw}")
    print(text)


if __name__ == "__main__":
    main()
