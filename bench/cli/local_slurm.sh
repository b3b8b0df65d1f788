#!/usr/bin/env bash
# A throwaway one-node Slurm (munged, slurmctld, slurmd) to measure `sbatch` against, and a
# command run next to it: local_slurm.sh COMMAND [ARG...]
#
# Everything runs in private network, PID and mount namespaces: only `lo` is up there, so
# the daemons' 0.0.0.0 listeners reach nothing outside, and every process started here
# (daemons, job steps) dies with the namespace when COMMAND ends. The state (slurm.conf,
# munge key and socket, StateSaveLocation, SlurmdSpoolDir, logs) lives in a fresh
# directory under $LOCAL_SLURM_TMP (default /tmp, a disk here - not tmpfs), removed at the
# end unless LOCAL_SLURM_KEEP=1. COMMAND sees SLURM_CONF, so `sbatch`, `squeue`,
# `scancel` talk to this Slurm, and LOCAL_SLURM_DIR (a scratch directory of that disk).
#
# Needs root (namespaces; slurmd runs jobs as their user) and the Debian packages
# slurm-wlm (slurmctld, slurmd, sbatch) and munge.
#
# e.g. bench/cli/local_slurm.sh sh -c 'cd "$LOCAL_SLURM_DIR" && sbatch --wrap true && squeue'
set -euo pipefail

if [ "${LOCAL_SLURM_INSIDE:-}" != 1 ]; then
  [ $# -ge 1 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }
  [ "$(id -u)" = 0 ] || { echo "$0: needs root (network namespace, slurmd)" >&2; exit 2; }
  for tool in unshare ip munged slurmctld slurmd sbatch; do
    command -v "$tool" >/dev/null || { echo "$0: $tool not found (apt-get install slurm-wlm)" >&2; exit 2; }
  done
  # --pid with --fork: this script is PID 1 of the namespace, so whatever is left when it
  # exits (a job step that slurmd forked, say) is killed by the kernel, not leaked.
  # --kill-child: a TERM (timeout, Ctrl-C) of unshare reaches this script inside, whose
  # trap then tears down as on a normal exit.
  exec env LOCAL_SLURM_INSIDE=1 unshare --net --pid --mount --fork --mount-proc \
    --kill-child=TERM -- "$0" "$@"
fi

ip link set lo up
# Slurm resolves its listen address with AI_ADDRCONFIG, and glibc counts no IPv4 address
# but 127.0.0.1 as configured; a second loopback address (on lo) is enough.
ip addr add 127.0.0.2/8 dev lo
S="$(mktemp -d "${LOCAL_SLURM_TMP:-/tmp}/local-slurm-XXXXXX")"
chmod 755 "$S"
PIDS=()
cleanup() {
  local rc=$?
  # Jobs first, while slurmctld and slurmd can still end their steps (a slurmd told to stop
  # with a step running waits for it), then the daemons, newest first; one that has not
  # stopped after 5 s is killed. Whatever is left (a stray slurmstepd) dies with the PID
  # namespace when this script, its PID 1, exits.
  scancel --quiet --user=root >/dev/null 2>&1 || true
  for _ in $(seq 50); do
    [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
    sleep 0.1
  done
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    kill -TERM "${PIDS[i]}" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "${PIDS[i]}" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "${PIDS[i]}" 2>/dev/null || true
    wait "${PIDS[i]}" 2>/dev/null || true
  done
  if [ "${LOCAL_SLURM_KEEP:-}" = 1 ]; then
    echo "local_slurm: state kept in $S" >&2
  else
    rm -rf "$S"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 143' TERM INT

mkdir -p "$S/munge" "$S/state" "$S/spool" "$S/log" "$S/work"
dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$S/munge/munge.key"
munged --foreground --force --key-file="$S/munge/munge.key" --socket="$S/munge/socket" \
  --pid-file="$S/munge/munged.pid" --seed-file="$S/munge/seed" \
  --log-file="$S/log/munged.log" &
PIDS+=($!)

cat >"$S/slurm.conf" <<EOF
ClusterName=localbench
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge/socket
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MaxJobCount=100000
NodeName=localhost CPUs=2 State=UNKNOWN
PartitionName=bench Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$S/slurm.conf"
export LOCAL_SLURM_DIR="$S/work"

for _ in $(seq 50); do [ -S "$S/munge/socket" ] && break; sleep 0.1; done
slurmctld -D -i >>"$S/log/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -N localhost >>"$S/log/slurmd.out" 2>&1 &
PIDS+=($!)
# Ready once the node is idle (slurmd registered with slurmctld).
ready=""
for _ in $(seq 150); do
  if sinfo -h -n localhost -o %T 2>/dev/null | grep -qx idle; then ready=1; break; fi
  sleep 0.2
done
if [ -z "$ready" ]; then
  echo "local_slurm: the node did not come up; logs:" >&2
  tail -n 20 "$S"/log/* >&2 || true
  exit 1
fi
"$@"
