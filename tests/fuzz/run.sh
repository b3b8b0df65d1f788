#!/usr/bin/env bash
# Builds the fuzz targets with Clang, libFuzzer, AddressSanitizer (+LeakSanitizer) and
# UndefinedBehaviorSanitizer, and runs each for a while. See docs/SECURITY.md.
#
#   tests/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Defaults: 600 s per target, all targets, one after the other. New inputs go to
# ${BUILD_DIR}/corpus/<target>/ (seeded from tests/fuzz/corpus/<target>/; merge worthwhile
# ones back with -merge=1). Crash, leak and timeout reproducers go to
# ${BUILD_DIR}/artifacts/<target>/. Each run's log is ${BUILD_DIR}/logs/<target>.log, and a
# one-line summary per target (executions, exec/s, coverage, features, corpus, peak RSS)
# is appended to ${BUILD_DIR}/summary.txt. Exits non-zero when any target found something.
#
# Environment: BUILD_DIR (default build-fuzz), CC/CXX (default clang/clang++),
# JOBS (build parallelism, default 2), FUZZ_FLAGS (extra libFuzzer flags).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_TARGET="${1:-600}"
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(fuzz_job_spec fuzz_http_request fuzz_worker_message fuzz_raft_command fuzz_parquet)
fi
BUILD_DIR="${BUILD_DIR:-build-fuzz}"
CC="${CC:-clang}"
CXX="${CXX:-clang++}"
JOBS="${JOBS:-2}"

if ! command -v "$CXX" >/dev/null; then
  echo "fuzz: $CXX not found (Debian 12: apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
SAN="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DTRAINTL_BUILD_TORCH=OFF >/dev/null
if ! grep -q '^TRAINTL_FUZZ_ENGINE:INTERNAL=libfuzzer' "$BUILD_DIR/CMakeCache.txt"; then
  echo "fuzz: $CXX cannot link -fsanitize=fuzzer (Debian 12: apt-get install libclang-rt-14-dev)" >&2
  exit 2
fi
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
mkdir -p "$BUILD_DIR/logs"
for t in "${TARGETS[@]}"; do
  corpus="$BUILD_DIR/corpus/$t"
  artifacts="$BUILD_DIR/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  log="$BUILD_DIR/logs/$t.log"
  echo "fuzz: $t for ${SECONDS_PER_TARGET}s (log: $log)"
  rc=0
  # shellcheck disable=SC2086
  "$BUILD_DIR/bin/$t" -max_total_time="$SECONDS_PER_TARGET" -max_len=131072 -timeout=30 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$artifacts/" ${FUZZ_FLAGS:-} \
    "$corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  rss=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  last=$(grep -E '#[0-9]+.*(cov|ft):' "$log" | tail -1 || true)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || true)
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || true)
  units=$(echo "$last" | grep -o 'corp: [0-9]*' | grep -o '[0-9]*' || true)
  verdict=clean
  if [ "$rc" -ne 0 ]; then verdict="FOUND (exit $rc; see $log)"; status=1; fi
  line="$(date -u +%Y-%m-%dT%H:%MZ) $t seconds=$SECONDS_PER_TARGET execs=${execs:-?} exec_per_s=${rate:-?} cov=${cov:-?} ft=${ft:-?} corpus=${units:-?} peak_rss_mb=${rss:-?} result=$verdict"
  echo "$line" | tee -a "$BUILD_DIR/summary.txt"
done
exit $status
