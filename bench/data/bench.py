"""CSV -> float tensor throughput (bench/README.md, "bench/data").

Measures, on one generated CSV file of a few hundred MB (16 float columns and an int label):
  traintl    traintl-worker running libdata_bench_train.so: get_dataset_shard +
             iter_torch_batches(dtype=float32) + each batch's columns stacked into one
             [B, 17] tensor (column-major: torch::stack(dim=0).t()), 1 rank, and 2 ranks
             splitting the file (which needs the file's rows counted first: one rank counts
             them and the other loads its row index from <trial_dir>/.data_index, each run
             with a fresh trial dir; 2 ranks of a later job on the node, loading the row
             index an earlier one stored in the node's data_index_dir (what the agent
             passes: <data_dir>/data_index); and, as before that index was shared, each rank
             counting the whole file itself), from the page cache; 1 rank after evicting the
             file (cold: the library evicts it just before its timed read), and the same
             AGED_S seconds after the eviction; 1 rank with one parser thread
             (IterOptions::num_threads = 1; the others use the default); and 1 rank
             stacking row-major (torch::stack(dim=1), a strided copy);
  pandas     Debian's python3-pandas: pd.read_csv(path).to_numpy(dtype=np.float32);
  raw read   cat FILE > /dev/null, from the page cache (warm) and after evicting the file
             from it with posix_fadvise(DONTNEED) (cold; and AGED_S seconds after that);
and the peak resident memory of each reader. Rounds alternate between the readers so that
load from other processes hits all of them; the result is the median of each. Writes
RESULTS.md next to this file. Python 3 stdlib only (pandas runs in /usr/bin/python3).

"Raw read bandwidth" is cat's: warm it is the page cache's (memory) bandwidth, cold the
storage's. Ratios are given against both; the like-for-like ones are warm readers against
warm cat and the cold reader against cold cat.
"""
import argparse
import contextlib
import datetime
import glob
import json
import os
import platform
import random
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PANDAS_READER = r"""
import json, sys, time
import numpy as np, pandas as pd
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
before = status("VmRSS:")
t0, c0 = time.perf_counter(), time.process_time()
a = pd.read_csv(sys.argv[1]).to_numpy(dtype=np.float32)
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "rows": a.shape[0],
                  "rss_before_bytes": before, "peak_rss_bytes": status("VmHWM:")}))
"""


def generate(path, rows, features):
    rng = random.Random(1)
    with open(path + ".tmp", "w") as f:
        f.write(",".join([f"f{i}" for i in range(features)] + ["label"]) + "\n")
        chunk = []
        for i in range(rows):
            chunk.append(",".join(f"{rng.uniform(-10, 10):.6f}" for _ in range(features)) +
                         f",{i % 10}\n")
            if len(chunk) == 10000:
                f.write("".join(chunk))
                chunk = []
        f.write("".join(chunk))
    os.rename(path + ".tmp", path)


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


# A cold read starts at most milliseconds after its file was evicted, for cat and for
# traintl alike (the bench library evicts the file itself, after the worker has started).
# Why it matters: on a VM whose balloon device reports free memory to the hypervisor
# (virtio-balloon free page reporting: free 2 MiB blocks are handed back after about 2 s),
# the page cache that a cold read fills lands in memory the host has taken back, and the
# first touch of every page then costs microseconds: cat of the bench file 5 s after its
# eviction took 0.61-0.85 s in most tries here, against 0.15-0.32 s right after it
# (RESULTS.md; how much has gone back after 5 s varies). The "aged" rows measure both
# readers AGED_S seconds after the eviction.
AGED_S = 5.0

# This VM's kernel (6.18, "fc") has a knob the mainline one lacks: min_free_ms, how long a
# free block must stay free before it is reported. At 0 (its default here) a reporting
# pass may take the pages an eviction freed while a cold read is still filling the page
# cache; a reader slower than cat (traintl parses as it reads) is exposed for longer, so
# its cold rounds are bimodal. --hold-free-pages-ms sets it for the run (root; restored
# after) to measure the cold rows without that race.
PAGE_REPORTING = "/sys/module/page_reporting/parameters"


def page_reporting():
    """What the VM does with free memory, for the results' header: a string."""
    reporting = False
    for dev in glob.glob("/sys/bus/virtio/devices/*"):
        try:
            with open(os.path.join(dev, "device")) as f:
                balloon = f.read().strip() == "0x0005"
            with open(os.path.join(dev, "features")) as f:
                features = f.read().strip()
        except OSError:
            continue
        # VIRTIO_BALLOON_F_REPORTING is feature bit 5; the file lists bit 0 first.
        if balloon and len(features) > 5 and features[5] == "1":
            reporting = True
    if not reporting:
        return "no free page reporting"
    params = []
    for name in ("page_reporting_order", "min_free_ms"):
        try:
            with open(os.path.join(PAGE_REPORTING, name)) as f:
                params.append(f"{name} {f.read().strip()}")
        except OSError:
            pass
    return "virtio-balloon free page reporting on" + (f" ({', '.join(params)})" if params else "")


@contextlib.contextmanager
def hold_free_pages(ms):
    """Sets the kernel's min_free_ms to `ms` inside the block (nothing when ms is None)."""
    if ms is None:
        yield
        return
    knob = os.path.join(PAGE_REPORTING, "min_free_ms")
    try:
        with open(knob) as f:
            old = f.read().strip()
        with open(knob, "w") as f:
            f.write(str(ms))
    except OSError as e:
        raise SystemExit(f"--hold-free-pages-ms: cannot set {knob}: {e} (root, and a kernel "
                         "with that knob)")
    try:
        yield
    finally:
        with open(knob, "w") as f:
            f.write(old)


def raw_read(path, cold, age=0.0):
    if cold:
        evict(path)
        time.sleep(age)
    t0 = time.perf_counter()
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
    seconds = time.perf_counter() - t0
    if cold:  # leave the file cached for the next reader, as it was
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
    return seconds


def traintl_run(worker, lib, path, world, tmp, cold=False, threads=0, stack="columns",
                share_index=True, fmt="csv", index_dir="", age=0.0):
    """Runs `world` traintl-worker ranks (this script plays the agent); their metrics.

    cold: the library evicts the file from the page cache just before its timed read (and
    this caches it again afterwards); age: the seconds it then waits (see AGED_S).
    threads: parser threads per rank (0 = the reader's default).
    stack: how the library makes each batch one [rows, 17] tensor (bench_train.cc).
    share_index: the ranks get a (fresh) trial dir, where they share the row index; without
    it none, so that each rank counts the rows itself.
    index_dir: the node's row index directory (the context's data_index_dir), "" = none.
    fmt: the dataset's format (csv, or parquet for the --parquet rows)."""
    trial_dir = tempfile.mkdtemp(dir=tmp, prefix="trial-") if share_index else ""
    config = {"batch_size": 4096, "threads": threads, "stack": stack}
    if cold:
        config.update(evict=path, evict_wait_s=age)
    procs, sel, results, buffers = [], selectors.DefaultSelector(), {}, {}
    for rank in range(world):
        ctx = {"job_id": "bench", "job_name": "data-bench", "attempt": 1, "world_rank": rank,
               "world_size": world, "local_rank": rank, "local_world_size": world,
               "node_rank": 0, "library": lib, "function": "read_loop",
               "config": config,
               "trial_dir": trial_dir, "data_index_dir": index_dir,
               "staging_dir": os.path.join(tmp, f"staging{rank}"), "master_addr": "127.0.0.1",
               "master_port": 0, "use_gpu": False,
               "datasets": {"bench": {"uri": "file://" + path, "format": fmt, "split": True}}}
        ctx_path = os.path.join(tmp, f"rank{rank}.json")
        with open(ctx_path, "w") as f:
            json.dump(ctx, f)
        ours, theirs = socket.socketpair()
        log = open(os.path.join(tmp, f"rank{rank}.log"), "w")

        # fd 3 is the channel (docs/WORKER_PROTOCOL.md). close_fds would close it after
        # preexec_fn; Python's own fds are not inheritable, so none leak without it.
        def child_fd3(fd=theirs.fileno()):
            os.dup2(fd, 3)
        p = subprocess.Popen([worker, "--context", ctx_path], stdout=log, stderr=log,
                             preexec_fn=child_fd3, close_fds=False)
        theirs.close()
        log.close()
        procs.append(p)
        sel.register(ours, selectors.EVENT_READ, rank)
        buffers[rank] = b""
    open_socks = world
    deadline = time.monotonic() + 600
    while open_socks and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1):
            sock, rank = key.fileobj, key.data
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                # A report of metrics alone does not wait for its ack (docs/WORKER_PROTOCOL.md):
                # the worker may have exited before reading it, which resets the channel.
                data = b""
            if not data:
                sel.unregister(sock)
                sock.close()
                open_socks -= 1
                continue
            buffers[rank] += data
            while b"\n" in buffers[rank]:
                line, buffers[rank] = buffers[rank].split(b"\n", 1)
                m = json.loads(line)
                if m["type"] == "report":
                    results[rank] = m["metrics"]
                    try:
                        sock.sendall(json.dumps({"type": "ack", "seq": m["seq"]}).encode() + b"\n")
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # the worker is gone already; its done (if any) was read
                elif m["type"] == "done" and not m["ok"]:
                    raise RuntimeError(f"rank {rank} failed: {m.get('error')}")
    for p in procs:
        p.wait(timeout=60)
    if len(results) != world:
        logs = "".join(open(os.path.join(tmp, f"rank{r}.log")).read() for r in range(world))
        raise RuntimeError("a rank did not report:\n" + logs)
    if cold:
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
    return [results[r] for r in range(world)]


def pandas_run(python, path):
    out = subprocess.run([python, "-c", PANDAS_READER, path], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def mib(n):
    return f"{n / 2**20:.0f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the build's bin/ (traintl-worker)")
    ap.add_argument("--lib", required=True, help="libdata_bench_train.so")
    ap.add_argument("--data", required=True, help="the CSV file (generated when missing)")
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python", default="/usr/bin/python3", help="an interpreter with pandas")
    ap.add_argument("--results", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--parquet", default="",
                    help="a directory with bench-snappy.parquet and bench-zstd.parquet (f* "
                         "DOUBLE), and bench-float-snappy.parquet and bench-float-zstd.parquet "
                         "(f* FLOAT) when there, the same rows (bench_parquet.py writes them): "
                         "adds their 1-rank rows")
    ap.add_argument("--hold-free-pages-ms", type=int, default=None,
                    help="root, on a kernel with page_reporting's min_free_ms (see "
                         "PAGE_REPORTING): report free memory to the hypervisor only after "
                         "it has been free this long, during the run (restored after)")
    args = ap.parse_args()
    with hold_free_pages(args.hold_free_pages_ms):
        run(args)


def run(args):

    if not os.path.exists(args.data):
        print(f"generating {args.data} ({args.rows} rows)", file=sys.stderr)
        generate(args.data, args.rows, 16)
    size = os.path.getsize(args.data)
    worker = os.path.join(args.bin, "traintl-worker")
    load_before = os.getloadavg()
    subprocess.run(["cat", args.data], stdout=subprocess.DEVNULL, check=True)  # warm up

    samples = {k: [] for k in ("raw_warm", "raw_cold", "raw_cold_aged", "traintl1", "traintl2",
                               "traintl2_node", "traintl2_own", "traintl1_cold",
                               "traintl1_cold_aged", "traintl1_k1", "traintl1_rows", "pandas")}
    cpu_samples = {k: [] for k in ("traintl1", "traintl2", "traintl2_node", "traintl2_own",
                                   "traintl1_cold", "traintl1_cold_aged", "traintl1_k1",
                                   "traintl1_rows", "pandas")}
    memory = {}
    rows_seen = None
    parquet = {}
    if args.parquet:
        parquet = {"traintl1_pq_snappy": os.path.join(args.parquet, "bench-snappy.parquet"),
                   "traintl1_pq_zstd": os.path.join(args.parquet, "bench-zstd.parquet")}
        for k, path in parquet.items():
            if not os.path.exists(path):
                raise SystemExit(f"{path} is missing (bench/data/bench_parquet.py writes it)")
        for k, name in (("traintl1_pq_snappy_f32", "bench-float-snappy.parquet"),
                        ("traintl1_pq_zstd_f32", "bench-float-zstd.parquet")):
            if os.path.exists(os.path.join(args.parquet, name)):
                parquet[k] = os.path.join(args.parquet, name)
        for k in parquet:
            samples[k], cpu_samples[k] = [], []
    with tempfile.TemporaryDirectory(prefix="traintl-bench-data-") as tmp:
        # The node's index directory, as an earlier job on the node left it (not timed).
        node_index = os.path.join(tmp, "data_index")
        # Entries are stored for files unchanged for 2 s (worker/data/index_cache.h).
        time.sleep(max(0.0, os.stat(args.data).st_ctime + 2.5 - time.time()))
        traintl_run(worker, args.lib, args.data, 2, tmp, index_dir=node_index)
        if not any(n.endswith(".idx") for n in os.listdir(node_index)):
            raise RuntimeError(f"no row index was stored in {node_index}")
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
            samples["raw_warm"].append(raw_read(args.data, cold=False))
            samples["raw_cold"].append(raw_read(args.data, cold=True))
            samples["raw_cold_aged"].append(raw_read(args.data, cold=True, age=AGED_S))
            one = traintl_run(worker, args.lib, args.data, 1, tmp)[0]
            samples["traintl1"].append(one["seconds"])
            cpu_samples["traintl1"].append(one["cpu_seconds"])
            rows_seen = one["rows"]
            memory["traintl1"] = one
            two = traintl_run(worker, args.lib, args.data, 2, tmp)
            samples["traintl2"].append(max(m["seconds"] for m in two))
            cpu_samples["traintl2"].append(sum(m["cpu_seconds"] for m in two))
            memory["traintl2"] = max(two, key=lambda m: m["peak_rss_bytes"])
            node = traintl_run(worker, args.lib, args.data, 2, tmp, index_dir=node_index)
            samples["traintl2_node"].append(max(m["seconds"] for m in node))
            cpu_samples["traintl2_node"].append(sum(m["cpu_seconds"] for m in node))
            memory["traintl2_node"] = max(node, key=lambda m: m["peak_rss_bytes"])
            own = traintl_run(worker, args.lib, args.data, 2, tmp, share_index=False)
            samples["traintl2_own"].append(max(m["seconds"] for m in own))
            cpu_samples["traintl2_own"].append(sum(m["cpu_seconds"] for m in own))
            memory["traintl2_own"] = max(own, key=lambda m: m["peak_rss_bytes"])
            cold = traintl_run(worker, args.lib, args.data, 1, tmp, cold=True)[0]
            samples["traintl1_cold"].append(cold["seconds"])
            cpu_samples["traintl1_cold"].append(cold["cpu_seconds"])
            memory["traintl1_cold"] = cold
            aged = traintl_run(worker, args.lib, args.data, 1, tmp, cold=True, age=AGED_S)[0]
            samples["traintl1_cold_aged"].append(aged["seconds"])
            cpu_samples["traintl1_cold_aged"].append(aged["cpu_seconds"])
            memory["traintl1_cold_aged"] = aged
            k1 = traintl_run(worker, args.lib, args.data, 1, tmp, threads=1)[0]
            samples["traintl1_k1"].append(k1["seconds"])
            cpu_samples["traintl1_k1"].append(k1["cpu_seconds"])
            memory["traintl1_k1"] = k1
            rm = traintl_run(worker, args.lib, args.data, 1, tmp, stack="rows")[0]
            samples["traintl1_rows"].append(rm["seconds"])
            cpu_samples["traintl1_rows"].append(rm["cpu_seconds"])
            memory["traintl1_rows"] = rm
            for k, path in parquet.items():
                pq = traintl_run(worker, args.lib, path, 1, tmp, fmt="parquet")[0]
                if pq["rows"] != rows_seen:
                    raise RuntimeError(f"{path}: {pq['rows']} rows, the CSV {rows_seen}")
                samples[k].append(pq["seconds"])
                cpu_samples[k].append(pq["cpu_seconds"])
                memory[k] = pq
            pd_result = pandas_run(args.python, args.data)
            samples["pandas"].append(pd_result["seconds"])
            cpu_samples["pandas"].append(pd_result["cpu_seconds"])
            memory["pandas"] = pd_result
            if pd_result["rows"] != rows_seen:
                raise RuntimeError(f"pandas read {pd_result['rows']} rows, traintl {rows_seen}")
    load_after = os.getloadavg()
    reporting = page_reporting()

    med = {k: statistics.median(v) for k, v in samples.items()}
    mbps = {k: size / v / 1e6 for k, v in med.items()}
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    lines = [
        "# bench/data: CSV -> float tensor throughput",
        "",
        f"Generated by `bench/data/run.sh` on {datetime.date.today()} "
        f"({platform.node()}: {os.cpu_count()} CPUs, {cpu}; load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after; {reporting}). File: "
        f"{mib(size)} "
        f"({size} bytes), {rows_seen} rows x 17 columns (16 floats with 6 decimals, an int "
        f"label), read from the page cache except where the row says cold (the file "
        f"evicted with posix_fadvise(DONTNEED) first); median of {args.rounds} rounds.",
        "",
        "Raw read bandwidth is that of `cat FILE > /dev/null`: from the page cache (warm) it "
        "measures memory bandwidth, after eviction (cold) the storage's. Like for like are "
        "the warm readers against warm cat and the cold reader against cold cat.",
        "",
        "| reader | seconds | MB/s | vs pandas | vs raw read (warm) | vs raw read (cold) |",
        "|---|---|---|---|---|---|",
    ]
    names = {"traintl1": "traintl, 1 rank (iter_torch_batches -> float32 [B, 17])",
             "traintl2": "traintl, 2 ranks splitting the file (incl. the row count, shared)",
             "traintl2_node": "traintl, 2 ranks, the row index of an earlier job on the node",
             "traintl2_own": "traintl, 2 ranks, each counting the rows itself (index not shared)",
             "traintl1_cold": "traintl, 1 rank, file evicted first (cold)",
             "traintl1_cold_aged": f"traintl, 1 rank, cold, {AGED_S:.0f} s after the eviction",
             "traintl1_k1": "traintl, 1 rank, 1 parser thread (num_threads=1)",
             "traintl1_rows": "traintl, 1 rank, row-major [B, 17] (torch::stack(dim=1))",
             "traintl1_pq_snappy": "traintl, 1 rank, the rows as Parquet SNAPPY (MB/s of the CSV)",
             "traintl1_pq_zstd": "traintl, 1 rank, the rows as Parquet ZSTD (MB/s of the CSV)",
             "traintl1_pq_snappy_f32":
                 "traintl, 1 rank, the rows as Parquet SNAPPY, f* FLOAT (MB/s of the CSV)",
             "traintl1_pq_zstd_f32":
                 "traintl, 1 rank, the rows as Parquet ZSTD, f* FLOAT (MB/s of the CSV)",
             "pandas": "pandas read_csv().to_numpy(float32)",
             "raw_warm": "raw read: cat > /dev/null, page cache (warm)",
             "raw_cold": "raw read: cat > /dev/null, evicted first (cold)",
             "raw_cold_aged": f"raw read: cat, cold, {AGED_S:.0f} s after the eviction"}
    for k in ("traintl1", "traintl2", "traintl2_node", "traintl2_own", "traintl1_cold",
              "traintl1_cold_aged", "traintl1_k1", "traintl1_rows", *parquet, "pandas",
              "raw_warm", "raw_cold", "raw_cold_aged"):
        lines.append(f"| {names[k]} | {med[k]:.3f} | {mbps[k]:.0f} | "
                     f"{mbps[k] / mbps['pandas']:.2f}x | {mbps[k] / mbps['raw_warm']:.3f}x | "
                     f"{mbps[k] / mbps['raw_cold']:.3f}x |")
    lines += [
        "",
        "Against the targets of issue #5 (>= 2x pandas, >= 0.3x the raw read bandwidth): "
        f"1 rank {mbps['traintl1'] / mbps['pandas']:.2f}x pandas; "
        f"cold against cold cat {mbps['traintl1_cold'] / mbps['raw_cold']:.3f}x; "
        f"warm against warm cat {mbps['traintl1'] / mbps['raw_warm']:.3f}x (1 rank), "
        f"{mbps['traintl2'] / mbps['raw_warm']:.3f}x (2 ranks).",
    ]
    cpu_med = {k: statistics.median(v) for k, v in cpu_samples.items()}
    lines += [
        "",
        "CPU time of the readers (all threads; on a loaded machine wall time depends on what "
        "else runs, CPU time much less):",
        "",
        "| reader | CPU seconds | MB per CPU second | vs pandas |",
        "|---|---|---|---|",
    ]
    for k in ("traintl1", "traintl2", "traintl2_node", "traintl2_own", "traintl1_cold",
              "traintl1_cold_aged", "traintl1_k1", "traintl1_rows", *parquet, "pandas"):
        per_cpu = size / cpu_med[k] / 1e6
        lines.append(f"| {names[k]} | {cpu_med[k]:.3f} | {per_cpu:.0f} | "
                     f"{cpu_med['pandas'] / cpu_med[k]:.2f}x |")
    lines += [
        "",
        "Against issue 19's targets: cold 1 rank against cold cat "
        f"{mbps['traintl1_cold'] / mbps['raw_cold']:.3f}x (target >= 0.5x; "
        f"{mbps['traintl1_cold_aged'] / mbps['raw_cold_aged']:.3f}x when both start "
        f"{AGED_S:.0f} s after the eviction); CPU of 2 ranks "
        f"splitting the file against 1 rank {cpu_med['traintl2'] / cpu_med['traintl1']:.3f}x "
        "for the first job on the node to read it (one rank counts the rows), "
        f"{cpu_med['traintl2_node'] / cpu_med['traintl1']:.3f}x for a later job (the node's "
        "row index: no count) (target <= 1.1x; "
        f"{cpu_med['traintl2_own'] / cpu_med['traintl1']:.3f}x with each rank "
        "counting the rows itself).",
    ]
    if parquet:
        short = {"traintl1_pq_snappy": "SNAPPY (f* DOUBLE)", "traintl1_pq_zstd": "ZSTD (f* DOUBLE)",
                 "traintl1_pq_snappy_f32": "SNAPPY (f* FLOAT)",
                 "traintl1_pq_zstd_f32": "ZSTD (f* FLOAT)"}
        lines += [
            "",
            "Parquet (the same rows; label INT64; f* DOUBLE, or FLOAT: each CSV decimal "
            "rounded to float32 once, the values the CSV path gives) against the CSV path, "
            "1 rank, both through iter_torch_batches (target >= 2x), wall / CPU time: " +
            "; ".join(f"{short[k]} {med['traintl1'] / med[k]:.2f}x / "
                      f"{cpu_med['traintl1'] / cpu_med[k]:.2f}x" for k in parquet) + ".",
        ]
    lines += [
        "",
        "Peak memory (VmHWM of the reading process; \"before\" is its VmRSS just before "
        "reading, with LibTorch or pandas loaded):",
        "",
        "| reader | before | peak | peak - before |",
        "|---|---|---|---|",
    ]
    for k, label in (("traintl1", "traintl, 1 rank"), ("traintl2", "traintl, 2 ranks (each)"),
                     ("traintl2_node", "traintl, 2 ranks, the node's row index (each)"),
                     ("traintl2_own", "traintl, 2 ranks, index not shared (each)"),
                     ("traintl1_cold", "traintl, 1 rank, cold"),
                     ("traintl1_cold_aged", f"traintl, 1 rank, cold, {AGED_S:.0f} s after"),
                     ("traintl1_k1", "traintl, 1 rank, 1 parser thread"),
                     ("traintl1_rows", "traintl, 1 rank, row-major stack"), ("pandas", "pandas")):
        m = memory[k]
        lines.append(f"| {label} | {mib(m['rss_before_bytes'])} | {mib(m['peak_rss_bytes'])} | "
                     f"{mib(m['peak_rss_bytes'] - m['rss_before_bytes'])} |")
    first = memory["traintl1"]["first_batch_seconds"]
    lines += ["", f"traintl's first batch (1 rank) arrived after {first * 1000:.0f} ms.", ""]
    lines.append("Raw samples (seconds): " + json.dumps({k: [round(x, 4) for x in v]
                                                          for k, v in samples.items()}))
    lines.append("")
    lines.append("Raw samples (CPU seconds): " + json.dumps({k: [round(x, 4) for x in v]
                                                              for k, v in cpu_samples.items()}))
    text = "\n".join(lines) + "\n"
    with open(args.results, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
