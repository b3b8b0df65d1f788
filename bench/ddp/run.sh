#!/bin/bash
# DDP benchmark: 2-rank training steps/s through traintl::torch::prepare_model against
# torchrun + Python DistributedDataParallel (Debian's python3-torch), on the same MLP
# (784-512-512-10), data, optimizer, batch (64 per rank) and one intra-op thread per rank;
# and a 25 MB allreduce through prepare_model's path against raw c10d ProcessGroupGloo.
# Rounds alternate between the two sides so that load from other processes hits both; the
# result is the ratio of medians, written to bench/ddp/RESULTS.md.
#
# Usage: bench/ddp/run.sh [BUILD_DIR=build] [ROUNDS=5]
#   needs: cmake -DTRAINTL_BUILD_BENCH=ON, cmake --build BUILD_DIR --target ddp_bench;
#          apt-get install python3-torch
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
rounds=${2:-5}
bench=$build/bin/ddp_bench
steps=300
[[ -x $bench ]] || { echo "missing $bench (cmake --build $build --target ddp_bench)" >&2; exit 2; }
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "needs python3-torch" >&2; exit 2; }

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Runs `ddp_bench MODE` as 2 ranks; prints rank 0's output.
cpp_run() {
  local mode=$1; shift
  local store=$tmp/store.$RANDOM$RANDOM
  "$bench" "$mode" --rank 1 --world 2 --store "$store" "$@" >"$tmp/r1.out" 2>&1 &
  pids=($!)
  "$bench" "$mode" --rank 0 --world 2 --store "$store" "$@" 2>&1
  wait "${pids[0]}"
  pids=()
}

py_run() {
  /usr/bin/python3 "$here/torchrun_py311.py" --nproc_per_node 2 --master_addr 127.0.0.1 \
    --master_port "$(free_port)" "$here/train_ddp.py" "$steps" 64 2>&1 | grep steps_per_s
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

cpp=() py=()
for ((i = 1; i <= rounds; i++)); do
  c=$(cpp_run train --steps "$steps" --batch 64 | awk '/steps_per_s/ {print $2}')
  p=$(py_run | awk '{print $2}')
  echo "round $i: traintl $c steps/s, torchrun $p steps/s"
  cpp+=("$c"); py+=("$p")
done
cpp_med=$(printf '%s\n' "${cpp[@]}" | median)
py_med=$(printf '%s\n' "${py[@]}" | median)
train_ratio=$(awk -v a="$cpp_med" -v b="$py_med" 'BEGIN {printf "%.2f", a / b}')
# Each round runs both sides back to back, so the per-round ratio shares that round's load.
paired_ratio=$(for ((i = 0; i < rounds; i++)); do
  awk -v a="${cpp[$i]}" -v b="${py[$i]}" 'BEGIN {printf "%.4f\n", a / b}'
done | median)

ar=$(cpp_run allreduce --iters 10 | grep traintl_ms)
ours_ms=$(awk '{print $2}' <<<"$ar")
raw_ms=$(awk '{print $4}' <<<"$ar")
ar_ratio=$(awk -v a="$ours_ms" -v b="$raw_ms" 'BEGIN {printf "%.2f", b / a}')
echo "allreduce 25 MB: traintl $ours_ms ms, raw gloo $raw_ms ms"

cat >"$here/RESULTS.md" <<MD
# DDP benchmark results

Written by \`bench/ddp/run.sh\` on $(date -u +%Y-%m-%d) ($(getconf _NPROCESSORS_ONLN) CPUs, $(uname -r); load
average at the end: $(cut -d' ' -f1-3 /proc/loadavg)). Ratios against a peer measured in
the same run; absolute numbers are only context.

| what | traintl | peer | ratio (traintl / peer speed) |
|---|---|---|---|
| 2-rank DDP training, MLP 784-512-512-10, batch 64/rank, 1 thread/rank (steps/s, median of $rounds) | $cpp_med | torchrun + Python DDP: $py_med | **$train_ratio** |
| 25 MB float32 allreduce, 2 ranks on loopback (ms/op, median of 9 rounds, alternating which side goes first) | $ours_ms (prepare_model's path: our interface's sum allreduce) | raw ProcessGroupGloo: $raw_ms | **$ar_ratio** |

Median of the per-round training ratios (each round runs both sides back to back):
**$(printf '%.2f' "$paired_ratio")**. On a machine shared with other work, single rounds vary
by 2x; only the medians mean something.

Per-round training steps/s (traintl, torchrun): $(for ((i = 0; i < rounds; i++)); do printf '(%s, %s) ' "${cpp[$i]}" "${py[$i]}"; done)
MD
echo "wrote $here/RESULTS.md"
