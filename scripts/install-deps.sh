#!/usr/bin/env bash
# Installs traintl's build and test dependencies on Debian 12 (apt-get; root or sudo).
# Does nothing when everything is already installed.
#   scripts/install-deps.sh               everything: build, every test, packaging
#   scripts/install-deps.sh --quickstart  only what scripts/quickstart.sh builds and runs
#                                         (daemon, CLI, worker, LibTorch SDK, the example)
set -euo pipefail

# What the daemon, the CLI, the worker and the LibTorch example need to build and run
# (the worker's dataset reader: Parquet codecs from snappy, zstd and zlib).
PACKAGES=(
  build-essential cmake ninja-build pkg-config ca-certificates
  libboost-dev libboost-program-options-dev libboost-system-dev
  nlohmann-json3-dev libsqlite3-dev libssl-dev libfast-float-dev
  libsnappy-dev libzstd-dev zlib1g-dev
  libraft-dev libuv1-dev
  libtorch-dev libgloo-dev libopenblas0-pthread
  procps
)
if [ "${1:-}" != "--quickstart" ]; then
  # Tests, the Python and XGBoost entry points, packaging.
  PACKAGES+=(
    git catch2
    python3 chromium
    pybind11-dev libpython3.11-dev python3-numpy python3-torch
    libxgboost-dev python3-xgboost
    lintian systemd-container file
  )
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# No recommends: libtorch-dev would otherwise pull a desktop's worth of packages.
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
