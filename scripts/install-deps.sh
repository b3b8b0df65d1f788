#!/usr/bin/env bash
# Installs traintl's build and test dependencies on Debian 12 (apt-get; root or sudo).
# Does nothing when everything is already installed.
#   scripts/install-deps.sh                    everything: build, every test, packaging
#   scripts/install-deps.sh --quickstart       only what scripts/quickstart.sh builds and
#                                              runs (daemon, CLI, worker, LibTorch SDK, the
#                                              example): --quickstart-base and -torch
#   scripts/install-deps.sh --quickstart-base  the compiler and what the daemon, the CLI and
#                                              the worker need (no LibTorch)
#   scripts/install-deps.sh --quickstart-torch LibTorch, for traintl::torch and the example
#                                              (quickstart.sh installs it while it builds
#                                              the rest)
set -euo pipefail

# What the daemon, the CLI and the worker need to build and run (the worker's dataset
# reader: Parquet codecs from snappy, zstd and zlib).
BASE=(
  build-essential cmake ninja-build pkg-config ca-certificates
  libboost-dev libboost-program-options-dev libboost-system-dev
  nlohmann-json3-dev libsqlite3-dev libssl-dev libfast-float-dev
  libsnappy-dev libzstd-dev zlib1g-dev
  libraft-dev libuv1-dev
  procps
)
# What traintl::torch and the LibTorch example need.
TORCH=(libtorch-dev libgloo-dev libopenblas0-pthread)
case "${1:-}" in
  --quickstart) PACKAGES=("${BASE[@]}" "${TORCH[@]}") ;;
  --quickstart-base) PACKAGES=("${BASE[@]}") ;;
  --quickstart-torch) PACKAGES=("${TORCH[@]}") ;;
  "")
    # Tests, the Python and XGBoost entry points, packaging.
    PACKAGES=("${BASE[@]}" "${TORCH[@]}"
      git catch2
      python3 chromium
      pybind11-dev libpython3.11-dev python3-numpy python3-torch
      libxgboost-dev python3-xgboost
      lintian systemd-container file
    )
    ;;
  *)
    echo "usage: $0 [--quickstart | --quickstart-base | --quickstart-torch]" >&2
    exit 2
    ;;
esac

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
# --force-unsafe-io: dpkg skips its fsync per unpacked file (tens of thousands of Boost and
# LibTorch headers), as Debian's own container images configure it; a power cut during
# this install can leave packages to reinstall, never the rest of the system.
$SUDO apt-get install -y -q --no-install-recommends \
  -o Dpkg::Options::=--force-unsafe-io "${missing[@]}"
