#!/usr/bin/env bash
# The CLI's cost per call (issue 20): a shell loop of N `traintl submit` calls against one
# daemon, for one or more builds of the CLI in the same run, rounds interleaved. The jobs
# stay PENDING (a blocker holds the node's CPUs), so only the CLI and the commit are timed.
# With `sbatch` on PATH (a local Slurm) the same loop of `sbatch --wrap true` runs too.
#
#   bench/cli/submit_loop.sh [-n 100] [-r 3] TRAINTL_BINARY...
# e.g. bench/cli/submit_loop.sh /tmp/traintl.before build/bin/traintl
set -euo pipefail
cd "$(dirname "$0")/../.."
N=100
ROUNDS=3
while getopts n:r: opt; do
  case $opt in
    n) N=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || set -- build/bin/traintl
BIN=build/bin
LIB=build/tests/e2e/libs/libtest_train.so
W="$(mktemp -d /tmp/traintl-bench-cli-XXXXXX)"
DAEMON_PID=""
cleanup() {
  if [ -n "$DAEMON_PID" ]; then
    kill -TERM "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
  fi
  rm -rf "$W"
}
trap cleanup EXIT
"$BIN/traintld" --data-dir "$W/d" --api-address 127.0.0.1:0 --raft-address 127.0.0.1:0 \
  --num-cpus 2 >"$W/daemon.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 100); do [ -s "$W/d/api_address" ] && break; sleep 0.1; done
spec() {  # name workers epochs
  printf '{"name": "%s", "entrypoint": {"library": "%s"}, "train_loop_config": {"epochs": %s, "sleep_ms": 1000}, "scaling_config": {"num_workers": %s}}\n' \
    "$1" "$PWD/$LIB" "$3" "$2"
}
spec blocker 2 100000 >"$W/blocker.json"
spec pending 1 1 >"$W/job.json"
"$BIN/traintl" --data-dir "$W/d" submit "$W/blocker.json" >/dev/null
export XDG_CACHE_HOME="$W/cache"  # each CLI build keeps its own cache here
rate() {  # command... : calls per second of N runs
  local s e
  s=$(date +%s.%N)
  for _ in $(seq "$N"); do "$@" >/dev/null 2>&1; done
  e=$(date +%s.%N)
  echo "$N / ($e - $s)" | bc -l
}
echo "N=$N calls per loop, $ROUNDS rounds; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  for cli in "$@"; do
    printf 'round %s  %-40s %7.1f submits/s\n' "$r" "$cli" "$(rate "$cli" --data-dir "$W/d" submit "$W/job.json")"
  done
  if command -v sbatch >/dev/null; then
    printf 'round %s  %-40s %7.1f submits/s\n' "$r" "sbatch --wrap true" "$(rate sbatch --wrap true)"
  fi
done
