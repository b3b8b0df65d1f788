"""Parquet against CSV through traintl's data layer (bench/data/RESULTS.md, "Parquet").

The same rows as bench.py's CSV (2,000,000 x 16 floats with 6 decimals and an int label),
written as Parquet SNAPPY and ZSTD by an independent writer (parquet-wasm, the Rust
`parquet` crate: bench/data/to_parquet.mjs), with the floats as DOUBLE and as FLOAT (each
decimal rounded to float32 once, as the CSV reader does), read by data_read_bench
(Dataset + BatchReader, one rank, every column as float32, batches of 4096: what
iter_torch_batches asks of the reader, without LibTorch), and the raw read of each file
(cat, warm). Rounds alternate between the readers; the medians are printed as a Markdown
table. Before timing, each file is read once with a digest of every float32 value, and the
table says whether it equals the CSV's.

    python3 bench/data/bench_parquet.py --bench BUILD/bin/data_read_bench --dir BUILD/bench-parquet

The files are made in --dir when missing (node and `npm install` in tests/fixtures/parquet).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (generate(): the CSV of the CSV benchmark)


def cat(path):
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True, help="data_read_bench")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--rows", type=int, default=2000000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    args.dir = os.path.abspath(args.dir)
    os.makedirs(args.dir, exist_ok=True)
    csv = os.path.join(args.dir, "bench.csv")
    if not os.path.exists(csv):
        bench.generate(csv, args.rows, 16)
    prefix = os.path.join(args.dir, "bench")
    if not os.path.exists(prefix + "-float-zstd.parquet"):
        subprocess.run(["node", os.path.join(HERE, "to_parquet.mjs"), csv, prefix], check=True)
    files = {"csv": csv, "parquet SNAPPY, DOUBLE": prefix + "-snappy.parquet",
             "parquet ZSTD, DOUBLE": prefix + "-zstd.parquet",
             "parquet SNAPPY, FLOAT": prefix + "-float-snappy.parquet",
             "parquet ZSTD, FLOAT": prefix + "-float-zstd.parquet"}
    digest = {}
    for name, path in files.items():
        out = subprocess.run([args.bench, "file://" + path, "1", str(args.threads), "4096",
                              "digest"], check=True, capture_output=True, text=True).stdout
        digest[name] = json.loads(out)["digest"]
    runs = {name: [] for name in files}
    raw = {name: [] for name in files}
    for _ in range(args.rounds):
        for name, path in files.items():
            out = subprocess.run([args.bench, "file://" + path, "1", str(args.threads)],
                                 check=True, capture_output=True, text=True).stdout
            runs[name].append(json.loads(out))
            raw[name].append(cat(path))
    csv_bytes = os.path.getsize(csv)
    csv_s = statistics.median(r["seconds"] for r in runs["csv"])
    csv_cpu = statistics.median(r["cpu_seconds"] for r in runs["csv"])
    print("| reader | file MB | seconds | CPU seconds | rows/s (M) | CSV-equivalent MB/s "
          "| vs CSV (wall) | vs CSV (CPU) | raw read of the file (cat, warm) s "
          "| float32 values = CSV's |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, path in files.items():
        s = statistics.median(r["seconds"] for r in runs[name])
        cpu = statistics.median(r["cpu_seconds"] for r in runs[name])
        rows = runs[name][0]["rows"]
        print(f"| {name} | {os.path.getsize(path) / 1e6:.0f} | {s:.3f} | {cpu:.3f} "
              f"| {rows / s / 1e6:.1f} | {csv_bytes / s / 1e6:.0f} | {csv_s / s:.2f}x "
              f"| {csv_cpu / cpu:.2f}x | {statistics.median(raw[name]):.3f} "
              f"| {'yes' if digest[name] == digest['csv'] else 'NO'} |")
    print("\nraw samples:", json.dumps({n: [r["seconds"] for r in v] for n, v in runs.items()}))


if __name__ == "__main__":
    main()
