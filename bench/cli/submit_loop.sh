#!/usr/bin/env bash
# The CLI's cost per call (issue 20): a shell loop of N `traintl submit` calls against one
# daemon, for one or more builds of the CLI, and the same loop of `sbatch --wrap true`
# against a local one-node Slurm, in the same run with the rounds interleaved; the median
# of the rounds is printed at the end, with each CLI's ratio to sbatch.
#
# Both sides get the same conditions: the whole bench runs inside local_slurm.sh's private
# network namespace (the daemon on 127.0.0.1 there), the daemon's data dir and Slurm's
# state dir are on the same disk ($LOCAL_SLURM_TMP, default /tmp; not tmpfs: the Raft log
# is fsynced as in production), and the jobs of both stay PENDING behind a blocker that
# holds the node's 2 CPUs, so each loop times the submitting call and the controller's
# durable record of the job, not job launches.
#
#   bench/cli/submit_loop.sh [-n 200] [-r 5] [TRAINTL_BINARY...]
# e.g. bench/cli/submit_loop.sh /tmp/traintl.before build/bin/traintl
#
# Without Slurm (slurmctld/slurmd/sbatch/munged not installed) or without root (namespaces),
# only the traintl loops run, on the host's loopback.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=200
ROUNDS=5
while getopts n:r: opt; do
  case $opt in
    n) N=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || set -- build/bin/traintl

if [ -z "${LOCAL_SLURM_INSIDE:-}" ] && [ "$(id -u)" = 0 ] &&
  command -v slurmctld >/dev/null && command -v sbatch >/dev/null && command -v munged >/dev/null; then
  exec bench/cli/local_slurm.sh "$0" -n "$N" -r "$ROUNDS" "$@"
fi
SLURM=""
[ -n "${LOCAL_SLURM_INSIDE:-}" ] && SLURM=1

BIN=build/bin
LIB=build/tests/e2e/libs/libtest_train.so
W="$(mktemp -d "${LOCAL_SLURM_TMP:-/tmp}/traintl-bench-cli-XXXXXX")"
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
spec() {  # name workers epochs sleep_ms
  printf '{"name": "%s", "entrypoint": {"library": "%s"}, "train_loop_config": {"epochs": %s, "sleep_ms": %s, "checkpoint_every": 0}, "scaling_config": {"num_workers": %s}}\n' \
    "$1" "$PWD/$LIB" "$3" "$4" "$2"
}
# The blocker idles (one epoch of a day, no checkpoint) like Slurm's `sleep 1d`: no
# reports or checkpoints for the daemon to commit while the loops run.
spec blocker 2 2 86400000 >"$W/blocker.json"
spec pending 1 1 1000 >"$W/job.json"
"$BIN/traintl" --data-dir "$W/d" submit "$W/blocker.json" >/dev/null
export XDG_CACHE_HOME="$W/cache"  # each CLI build keeps its own cache here
if [ -n "$SLURM" ]; then
  # sbatch's cwd is a scratch dir (the job's slurm-<id>.out would go there).
  (cd "$LOCAL_SLURM_DIR" && sbatch --quiet -c 2 --wrap 'sleep 1d' >/dev/null)
fi
rate() {  # command... : calls per second of N runs
  local s e
  s=$(date +%s.%N)
  for _ in $(seq "$N"); do "$@" >/dev/null 2>&1; done
  e=$(date +%s.%N)
  echo "$N / ($e - $s)" | bc -l
}
NAMES=("$@")
[ -n "$SLURM" ] && NAMES+=("sbatch --wrap true")
declare -A RATES
echo "N=$N calls per loop, $ROUNDS rounds; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "${SLURM:+local Slurm $(sbatch --version | cut -d' ' -f2), }traintl data dir in $W"
# For the breakdown per call: the loop's floor (`true`, a fork and exec of a tiny
# program) and each CLI's start alone (`--version`: loading, relocation, static init).
for cli in "$@"; do NAMES+=("$cli --version"); done
NAMES+=("/bin/true")
for r in $(seq "$ROUNDS"); do
  for cli in "$@"; do
    x=$(rate "$cli" --data-dir "$W/d" submit "$W/job.json")
    RATES[$cli]+="$x "
    printf 'round %s  %-40s %7.1f submits/s\n' "$r" "$cli" "$x"
    x=$(rate "$cli" --version)
    RATES[$cli --version]+="$x "
  done
  x=$(rate /bin/true)
  RATES[/bin/true]+="$x "
  if [ -n "$SLURM" ]; then
    x=$(cd "$LOCAL_SLURM_DIR" && rate sbatch --wrap true)
    RATES[sbatch --wrap true]+="$x "
    printf 'round %s  %-40s %7.1f submits/s\n' "$r" "sbatch --wrap true" "$x"
  fi
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "medians (load now $(cut -d' ' -f1-3 /proc/loadavg)):"
SBATCH_MEDIAN=""
[ -n "$SLURM" ] && SBATCH_MEDIAN=$(echo "${RATES[sbatch --wrap true]}" | median)
for name in "${NAMES[@]}"; do
  m=$(echo "${RATES[$name]}" | median)
  ratio=""
  [ -n "$SBATCH_MEDIAN" ] && ratio=$(printf '  %.2fx sbatch' "$(echo "$m / $SBATCH_MEDIAN" | bc -l)")
  [[ "$name" == *--version || "$name" == /bin/true ]] && ratio=""
  printf '  %-40s %7.1f calls/s %6.2f ms/call%s\n' "$name" "$m" "$(echo "1000 / $m" | bc -l)" "$ratio"
done
[ -n "$SLURM" ] && echo "Slurm jobs queued: $(squeue -h | wc -l)"
exit 0
