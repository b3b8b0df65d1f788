#!/usr/bin/env bash
# Configures and builds traintl into ${BUILD_DIR:-build}: everything, or only the targets
# named in $TARGETS (space-separated). TRAINTL_BUILD_TESTS=OFF configures without the
# tests (no Catch2 needed), TRAINTL_BUILD_TORCH=OFF without LibTorch (the quickstart's
# first step); the compile flags are the same either way, so a later build with them
# reuses every object.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}"
JOBS="${JOBS:-$(nproc)}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  -DTRAINTL_BUILD_TESTS="${TRAINTL_BUILD_TESTS:-ON}" \
  -DTRAINTL_BUILD_TORCH="${TRAINTL_BUILD_TORCH:-ON}" "$@"
# shellcheck disable=SC2086  # TARGETS is a list
cmake --build "$BUILD_DIR" -j "$JOBS" ${TARGETS:+--target $TARGETS}
