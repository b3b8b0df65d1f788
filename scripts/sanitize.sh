#!/usr/bin/env bash
# Builds everything that does not load LibTorch with AddressSanitizer (+LeakSanitizer) and
# UndefinedBehaviorSanitizer and runs the unit and end-to-end suites under them.
#
#   scripts/sanitize.sh [CTEST_ARGS...]      e.g. scripts/sanitize.sh -R e2e
#
# Build directory: ${BUILD_DIR:-build-asan} (-DTRAINTL_BUILD_TORCH=OFF). Compiler: $CXX or
# the default (GCC). Every instrumented process - test binaries, and the traintld,
# traintl-worker and traintl processes the e2e tests start - writes its sanitizer reports
# to ${BUILD_DIR}/sanitizer-reports/ instead of stderr, so that a report from a daemon in
# the background is not lost; the script fails when ctest fails or when any report was
# written, and prints them. Results are summarized in ${BUILD_DIR}/sanitize-summary.txt.
#
# Deliberate crashes stay crashes: handle_segv=0 and handle_abort=0 let a test library's
# segfault or abort() reach the worker as the signal the e2e tests expect, and the null
# check of UBSan is off (-fno-sanitize=null) because it would turn that deliberate null
# store into an exit; a null dereference in traintl's own code still crashes the test.
# Workers get the sanitizer settings too (WorkerPool passes them on in sanitizer builds).
#
# GCC's UBSan ignores log_path: its reports go to the process's stderr, and
# -fno-sanitize-recover makes the process exit 1 at the first one, which fails its test;
# the script also fails when "runtime error:" or a sanitizer banner appears in the ctest
# output. Excluded by default (SANITIZE_EXCLUDE, a ctest -E regex): tests that measure
# resident memory, which ASan's shadow memory inflates by design.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build-asan}"
JOBS="${JOBS:-$(nproc)}"
SAN="-fsanitize=address,undefined -fno-sanitize=null -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
SANITIZE_EXCLUDE="${SANITIZE_EXCLUDE:-resident memory}"

scripts/install-deps.sh
start=$(date +%s)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINTL_BUILD_TORCH=OFF \
  -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build "$BUILD_DIR" -j "$JOBS"
build_s=$(( $(date +%s) - start ))

reports="$(cd "$BUILD_DIR" && pwd)/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:handle_segv=0:handle_abort=0:detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="log_path=$reports/lsan"
start=$(date +%s)
rc=0
# pipefail (above) makes the pipeline fail when ctest does, although tee succeeds.
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${CTEST_JOBS:-2}" \
  ${SANITIZE_EXCLUDE:+-E "$SANITIZE_EXCLUDE"} "$@" \
  | tee "$BUILD_DIR/sanitize-ctest.log" || rc=$?
test_s=$(( $(date +%s) - start ))

found=$(find "$reports" -type f | wc -l)
in_output=$(grep -cE "runtime error:|ERROR: (AddressSanitizer|LeakSanitizer)" \
  "$BUILD_DIR/sanitize-ctest.log" || true)
if [ "$in_output" -gt 0 ]; then
  echo "sanitize: $in_output sanitizer report line(s) in the test output:"
  grep -E "runtime error:|ERROR: (AddressSanitizer|LeakSanitizer)" "$BUILD_DIR/sanitize-ctest.log" | head -20
  found=$((found + in_output))
fi
if [ "$found" -gt 0 ]; then
  echo "sanitize: $found sanitizer report(s):"
  for f in "$reports"/*; do
    echo "==== $f"
    head -60 "$f"
  done
  rc=1
fi
passed=$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$BUILD_DIR/sanitize-ctest.log" | tail -1 || true)
summary="$(date -u +%Y-%m-%dT%H:%MZ) compiler=$(grep -m1 '^CMAKE_CXX_COMPILER:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2) build_s=$build_s test_s=$test_s ctest='${passed:-?}' sanitizer_reports=$found rc=$rc"
echo "$summary" | tee -a "$BUILD_DIR/sanitize-summary.txt"
exit $rc
