#!/usr/bin/env bash
# Runs the bench/startup benchmarks against a traintl build and updates
# bench/startup/RESULTS.md (see bench/README.md).
#
#   bench/startup/run.sh <build_dir> [startup|memory|all]     (default: all)
#
# Builds what it needs first: traintld, traintl, traintl-worker and traintl_torch in
# <build_dir> (must be configured with TRAINTL_BUILD_TORCH=ON), and the benchmark's own
# training libraries in <build_dir>/bench-startup. Needs Debian's python3-torch
# (apt-get install -y python3-torch) for the torchrun peer; override its interpreter with
# TORCH_PYTHON=... Environment: BENCH_ROUNDS (startup, default 10), BENCH_JOBS (memory,
# default 100), JOBS (parallel build jobs, default 2).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 <build_dir> [startup|memory|all]" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
what=${2:-all}
case $what in startup|memory|all) ;; *) echo "$0: unknown benchmark '$what'" >&2; exit 2 ;; esac

torch_python=${TORCH_PYTHON:-/usr/bin/python3}
if ! "$torch_python" -c "import torch.distributed" 2>/dev/null; then
  echo "$0: $torch_python cannot import torch (apt-get install -y python3-torch)" >&2
  exit 2
fi

echo "== building traintld traintl traintl-worker traintl_torch in $build" >&2
cmake --build "$build" --target traintld traintl traintl-worker traintl_torch -j"${JOBS:-2}" >&2
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")
libs=$build/bench-startup
echo "== building the benchmark libraries in $libs" >&2
cmake -S "$here" -B "$libs" -G Ninja -DTRAINTL_BUILD_DIR="$build" \
  -DCMAKE_BUILD_TYPE="${build_type:-RelWithDebInfo}" >/dev/null
cmake --build "$libs" -j"${JOBS:-2}" >&2

cd "$here"
export PYTHONDONTWRITEBYTECODE=1
if [[ $what == startup || $what == all ]]; then
  echo "== startup latency: traintl vs torchrun" >&2
  python3 startup_latency.py --bin "$build/bin" --libs "$libs"
fi
if [[ $what == memory || $what == all ]]; then
  echo "== daemon memory" >&2
  python3 daemon_memory.py --bin "$build/bin" --libs "$libs"
fi
echo "== results: $here/RESULTS.md" >&2
