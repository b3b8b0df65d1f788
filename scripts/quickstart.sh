#!/usr/bin/env bash
# Builds traintl, starts a single-node cluster in a temp dir, trains the digits example
# with 2 data-parallel workers, shows status and logs, and shuts down.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BUILD_DIR="${BUILD_DIR:-build}"

t0=$(date +%s)
scripts/install-deps.sh --quickstart-base
t1=$(date +%s)
# Only what it runs, with scripts/test.sh's build type, flags and directory: test.sh
# afterwards installs and builds the rest, not everything again.
export TRAINTL_BUILD_TESTS=OFF
TORCH_PACKAGES=(libtorch-dev libgloo-dev libopenblas0-pthread)
installed=$(dpkg-query -W -f='${Status}\n' "${TORCH_PACKAGES[@]}" 2>/dev/null |
  grep -c "install ok installed" || true)
if [ "$installed" -ne ${#TORCH_PACKAGES[@]} ]; then
  # apt spends most of its time waiting on the network and the disk: the CLI and the
  # worker, which do not need LibTorch, build meanwhile.
  echo "== installing LibTorch while the CLI and the worker build"
  mkdir -p "$BUILD_DIR"
  scripts/install-deps.sh --quickstart-torch >"$BUILD_DIR/install-torch.log" 2>&1 &
  apt_pid=$!
  TRAINTL_BUILD_TORCH=OFF TARGETS="traintl traintl-worker" scripts/build.sh
  if ! wait "$apt_pid"; then
    cat "$BUILD_DIR/install-torch.log"
    exit 1
  fi
  echo "== LibTorch installed ($(($(date +%s) - t1)) s after the compiler)"
fi
TARGETS="digits_train traintl_torch traintld traintl traintl-worker" scripts/build.sh
t2=$(date +%s)
echo "== dependencies took $((t1 - t0)) s before the build started, the build $((t2 - t1)) s"
BIN="$ROOT/$BUILD_DIR/bin"

DATA="$ROOT/$BUILD_DIR/digits-data"
if [ ! -s "$DATA/digits.csv" ]; then
  examples/digits/fetch_data.sh "$DATA"
fi

WORK="$(mktemp -d /tmp/traintl-quickstart-XXXXXX)"
DAEMON_PID=""
cleanup() {
  if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID"
    wait "$DAEMON_PID" || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== starting traintld (data dir $WORK/data)"
"$BIN/traintld" --data-dir "$WORK/data" --api-address 127.0.0.1:0 --raft-address 127.0.0.1:0 \
  >"$WORK/traintld.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 1 100); do
  [ -s "$WORK/data/api_address" ] && break
  kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$WORK/traintld.log"; exit 1; }
  sleep 0.1
done
echo "   listening on $(cat "$WORK/data/api_address")"
traintl() { "$BIN/traintl" --data-dir "$WORK/data" "$@"; }

# The example spec with this checkout's library and data paths.
sed -e "s#build/examples/libdigits_train.so#$ROOT/$BUILD_DIR/examples/libdigits_train.so#" \
    -e "s#/tmp/traintl-digits/digits.csv#$DATA/digits.csv#" \
    examples/digits/job.json >"$WORK/job.json"

echo "== traintl submit --wait"
set +e
traintl submit "$WORK/job.json" --wait
rc=$?
set -e
JOB=digits-ddp  # the job's name: every verb takes it (its newest job)
echo "== traintl status $JOB"
traintl status "$JOB"
echo "== traintl checkpoints $JOB"
traintl checkpoints "$JOB"
echo "== traintl logs $JOB -n 20 (every rank, interleaved)"
traintl logs "$JOB" -n 20
echo "== shutting down ($(($(date +%s) - t0)) s since the start)"
exit $rc
