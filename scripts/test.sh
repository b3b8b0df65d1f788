#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
start=$(date +%s)
scripts/build.sh
echo "test.sh: build took $(( $(date +%s) - start )) s"
# The digits example's test trains on the real data (fetched from Debian's python3-sklearn
# package without installing it).
export TRAINTL_DIGITS_CSV="$PWD/${BUILD_DIR:-build}/digits-data/digits.csv"
if [ ! -s "$TRAINTL_DIGITS_CSV" ]; then
  examples/digits/fetch_data.sh "$(dirname "$TRAINTL_DIGITS_CSV")" ||
    echo "test.sh: WARNING: could not fetch the digits data; its tests will say they skipped"
fi
# The /metrics test scrapes a daemon with Debian's real Prometheus (unpacked, not installed).
scripts/fetch_prometheus.sh "${BUILD_DIR:-build}/prometheus" ||
  echo "test.sh: WARNING: could not fetch prometheus; e2e.metrics will fail"
start=$(date +%s)
# Tests are hermetic (temp dirs, port 0), so they may run two at a time.
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${CTEST_JOBS:-2}" "$@"
echo "test.sh: tests took $(( $(date +%s) - start )) s"
