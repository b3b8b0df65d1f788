#!/bin/bash
# DDP benchmark, all in one run: the MLP (784-512-512-10, batch 64 per rank, SGD, one
# intra-op thread per rank) trained by one traintl rank alone, by 2 traintl ranks on this
# node (shared-memory collectives; and flat Gloo, TRAINTL_SHM_COLLECTIVES=0, for context)
# and by torchrun + Python DistributedDataParallel (Debian's python3-torch) with the same
# data; and a 25 MB allreduce through prepare_model's path against raw c10d
# ProcessGroupGloo.
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
steps=600
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

cpp_single() {
  "$bench" train --rank 0 --world 1 --store "$tmp/single.$RANDOM" --steps "$steps" --batch 64 2>&1
}

py_run() {
  /usr/bin/python3 "$here/torchrun_py311.py" --nproc_per_node 2 --master_addr 127.0.0.1 \
    --master_port "$(free_port)" "$here/train_ddp.py" "$steps" 64 2>&1 | grep steps_per_s
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

single=() shm=() gloo=() py=()
for ((i = 1; i <= rounds; i++)); do
  s=$(cpp_single | awk '/steps_per_s/ {print $2}')
  c=$(cpp_run train --steps "$steps" --batch 64 | awk '/steps_per_s/ {print $2}')
  g=$(TRAINTL_SHM_COLLECTIVES=0 cpp_run train --steps "$steps" --batch 64 | awk '/steps_per_s/ {print $2}')
  p=$(py_run | awk '{print $2}')
  echo "round $i: 1 rank $s, 2 ranks shm $c, 2 ranks gloo $g, torchrun $p steps/s (per rank)"
  single+=("$s"); shm+=("$c"); gloo+=("$g"); py+=("$p")
done
med() { printf '%s\n' "$@" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
single_med=$(med "${single[@]}")
shm_med=$(med "${shm[@]}")
gloo_med=$(med "${gloo[@]}")
py_med=$(med "${py[@]}")
# Each round runs every side back to back, so the per-round ratio shares that round's load.
paired() {
  local -n num=$1 den=$2
  for ((i = 0; i < rounds; i++)); do ratio "${num[$i]}" "${den[$i]}"; echo; done | median
}
shm_vs_single=$(ratio "$shm_med" "$single_med")
shm_vs_py=$(ratio "$shm_med" "$py_med")
gloo_vs_single=$(ratio "$gloo_med" "$single_med")
py_vs_single=$(ratio "$py_med" "$single_med")
paired_single=$(paired shm single)
paired_py=$(paired shm py)

ar=$(cpp_run allreduce --iters 10 | grep traintl_ms)
ours_ms=$(awk '{print $2}' <<<"$ar")
raw_ms=$(awk '{print $4}' <<<"$ar")
ar_ratio=$(ratio "$raw_ms" "$ours_ms")
echo "allreduce 25 MB: traintl $ours_ms ms, raw gloo $raw_ms ms"

cat >"$here/RESULTS.md" <<MD
# DDP benchmark results

Written by \`bench/ddp/run.sh $build $rounds\` on $(date -u +%Y-%m-%d) ($(getconf _NPROCESSORS_ONLN) CPUs, $(uname -r); load
average at the end: $(cut -d' ' -f1-3 /proc/loadavg)). Ratios against peers measured in
the same run; absolute numbers are only context. Steps/s are per rank, medians of $rounds
rounds; each round runs every side back to back.

| what | steps/s or ms | ratio | target |
|---|---|---|---|
| 1 traintl rank alone | $single_med | 1 | |
| 2 traintl ranks, shared memory (per rank) | $shm_med | **$shm_vs_single** of 1 rank (paired: $paired_single) | >= 0.7 |
| torchrun + Python DDP, 2 ranks (Gloo) | $py_med | $py_vs_single of 1 rank | |
| traintl shared memory vs torchrun | | **$shm_vs_py** (paired: $paired_py) | >= 1.8 |
| 2 traintl ranks, flat Gloo (TRAINTL_SHM_COLLECTIVES=0) | $gloo_med | $gloo_vs_single of 1 rank | |
| 25 MB float32 allreduce, 2 ranks: shared memory vs raw ProcessGroupGloo (ms/op, median of 9 rounds alternating which goes first) | $ours_ms vs $raw_ms | **$ar_ratio**x faster | >= 5 |

Per-round steps/s (1 rank, shm, gloo, torchrun): $(for ((i = 0; i < rounds; i++)); do printf '(%s, %s, %s, %s) ' "${single[$i]}" "${shm[$i]}" "${gloo[$i]}" "${py[$i]}"; done)
MD
echo "wrote $here/RESULTS.md"
