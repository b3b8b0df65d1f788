#!/usr/bin/env bash
# CSV -> float tensor throughput of traintl's dataset reader against pandas and the raw read
# bandwidth of the file; writes bench/data/RESULTS.md (see bench/README.md, "bench/data").
#
#   bench/data/run.sh <build_dir>
#
# Builds traintl-worker and traintl_torch in <build_dir> (configured with
# TRAINTL_BUILD_TORCH=ON) and the benchmark's training library in <build_dir>/bench-data.
# Needs Debian's pandas: apt-get install -y python3-pandas python3-numpy. Environment:
# BENCH_DATA (the CSV; generated when missing, default <build_dir>/bench-data/bench.csv),
# BENCH_ROWS (rows generated, default 2000000: ~300 MB), BENCH_ROUNDS (default 3),
# PANDAS_PYTHON (default /usr/bin/python3), JOBS (parallel build jobs, default 2).
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 <build_dir>" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
python=${PANDAS_PYTHON:-/usr/bin/python3}
if ! "$python" -c "import pandas, numpy" 2>/dev/null; then
  echo "$0: $python cannot import pandas (apt-get install -y python3-pandas python3-numpy)" >&2
  exit 2
fi

echo "== building traintl-worker traintl_torch in $build" >&2
cmake --build "$build" --target traintl-worker traintl_torch -j"${JOBS:-2}" >&2
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")
libs=$build/bench-data
echo "== building the benchmark library in $libs" >&2
cmake -S "$here" -B "$libs" -G Ninja -DTRAINTL_BUILD_DIR="$build" \
  -DCMAKE_BUILD_TYPE="${build_type:-RelWithDebInfo}" >/dev/null
cmake --build "$libs" -j"${JOBS:-2}" >&2

export PYTHONDONTWRITEBYTECODE=1
python3 "$here/bench.py" --bin "$build/bin" --lib "$libs/libdata_bench_train.so" \
  --data "${BENCH_DATA:-$libs/bench.csv}" --rows "${BENCH_ROWS:-2000000}" \
  --rounds "${BENCH_ROUNDS:-3}" --python "$python" ${BENCH_PARQUET:+--parquet "$BENCH_PARQUET"}
