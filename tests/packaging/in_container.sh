#!/bin/sh
# Runs inside a throw-away systemd-nspawn container booted by nspawn_test.py, as a oneshot
# unit: installs the packages for real and drives traintld.service through the real
# systemd. First the service package alone (what a node that runs C++ jobs, or a machine
# that only submits them, installs), then the library, SDK and Python packages.
# /mnt/deb: the packages; /mnt/libs: libtest_train.so; /mnt/out: this script's log, which
# ends with "ALL OK" or "FAILED: <what>".
set -u
OUT=/mnt/out
LOG=$OUT/log
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root

say() { echo "$*" >>"$LOG"; }
fail() {
  say "FAILED: $*"
  say "---- systemctl status traintld"
  systemctl status traintld --no-pager >>"$LOG" 2>&1
  say "---- journalctl -u traintld"
  journalctl -u traintld --no-pager -n 300 >>"$LOG" 2>&1
  exit 1
}
# check DESCRIPTION COMMAND...: runs the command, logs its output, stops at the first failure.
check() {
  what=$1
  shift
  if "$@" >>"$LOG" 2>&1; then say "ok: $what"; else fail "$what"; fi
}
prop() { systemctl show -p "$1" --value traintld; }
# json FILTER: reads JSON on stdin, prints the Python expression FILTER of it (as j).
json() { python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"; }
# wait_until SECONDS DESCRIPTION COMMAND...
wait_until() {
  n=$(($1 * 5))
  what=$2
  shift 2
  while ! "$@" >/dev/null 2>&1; do
    n=$((n - 1))
    [ "$n" -gt 0 ] || fail "timed out: $what"
    sleep 0.2
  done
  say "ok: $what"
}

say "== install"
# Container images often forbid maintainer scripts to start or stop services; a real
# node does not.
if [ -e /usr/sbin/policy-rc.d ]; then
  say "removing /usr/sbin/policy-rc.d (this container's copy)"
  rm -f /usr/sbin/policy-rc.d
fi
check "dpkg -i traintl (alone)" dpkg -i /mnt/deb/traintl_*_amd64.deb
check "no SDK, library or Python package came with it" sh -c \
  '! dpkg -l traintl-dev python3-traintl "libtraintl-*" 2>/dev/null | grep -q "^ii"'
check "the installed binaries find every library they link" sh -c \
  '! ldd /usr/bin/traintld /usr/bin/traintl /usr/bin/traintl-worker | grep "not found"'
check "the traintl system user exists" getent passwd traintl
check "/var/lib/traintl is traintl's, mode 700" \
  sh -c '[ "$(stat -c %U:%a /var/lib/traintl)" = traintl:700 ]'
check "the unit is not enabled" sh -c '[ "$(systemctl is-enabled traintld)" = disabled ]'
check "the service was not started" sh -c '! systemctl is-active --quiet traintld'
check "systemd-analyze verify of the installed unit" sh -c \
  'out=$(systemd-analyze verify /lib/systemd/system/traintld.service 2>&1); echo "$out"; [ -z "$out" ]'

say "== start (Type=notify: systemctl start returns after READY=1)"
check "systemctl start traintld" systemctl start traintld
check "active (running)" sh -c '[ "$(systemctl show -p SubState --value traintld)" = running ]'
say "StatusText: $(prop StatusText)"
check "STATUS= says the role" sh -c 'systemctl show -p StatusText --value traintld | grep -q "role=head"'
check "the watchdog is armed" sh -c '[ "$(systemctl show -p WatchdogUSec --value traintld)" = 30s ]'
MAIN=$(prop MainPID)
check "the daemon runs as traintl" sh -c "[ \"\$(ps -o user= -p $MAIN)\" = traintl ]"
check "root's CLI finds the daemon and its token" traintl nodes

say "== a long job: workers in the service's cgroup, then systemctl stop mid-job"
cat >/root/long.json <<'EOF'
{"name": "long", "entrypoint": {"library": "/mnt/libs/libtest_train.so"},
 "train_loop_config": {"epochs": 60, "sleep_ms": 200},
 "scaling_config": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
 "run_config": {"failure_config": {"max_failures": 3}}}
EOF
JOB=$(traintl --json submit /root/long.json | json 'j["job_id"]')
[ -n "$JOB" ] || fail "submit the long job"
say "job $JOB"
wait_until 60 "the long job has a checkpoint" sh -c \
  "traintl --json status $JOB | python3 -c 'import json,sys; j=json.load(sys.stdin); sys.exit(0 if (j.get(\"latest_checkpoint\") or {}).get(\"seq\", -1) >= 1 else 1)'"
WORKERS=$(pgrep -x traintl-worker)
say "workers: $WORKERS"
[ "$(echo "$WORKERS" | wc -w)" = 2 ] || fail "two workers run"
for p in $WORKERS; do
  check "worker $p is in traintld.service's cgroup" grep -q traintld.service "/proc/$p/cgroup"
  check "worker $p runs as traintl" sh -c "[ \"\$(ps -o user= -p $p)\" = traintl ]"
  check "worker $p has no new privileges" grep -q '^NoNewPrivs:[[:space:]]*1' "/proc/$p/status"
done
check "systemctl stop traintld" systemctl stop traintld
check "it exited by itself with 0 (Result=success)" sh -c \
  '[ "$(systemctl show -p Result --value traintld)" = success ] && [ "$(systemctl show -p ExecMainStatus --value traintld)" = 0 ]'
check "no worker is left" sh -c '! pgrep -x traintl-worker'
check "the workers were asked to stop" sh -c \
  'journalctl -u traintld -o cat --no-pager | grep -q "received SIGTERM"'
check "systemctl start traintld again" systemctl start traintld
wait_until 120 "the job resumes from its checkpoint and succeeds" sh -c \
  "traintl --json status $JOB | python3 -c 'import json,sys; j=json.load(sys.stdin); sys.exit(0 if j[\"state\"] == \"SUCCEEDED\" and j[\"attempt\"] >= 2 and j[\"attempts\"][-1][\"restored_from\"] else 1)'"

say "== journald priorities and systemctl reload"
check "info lines have priority 6" sh -c \
  'journalctl -u traintld -p info..info -o cat --no-pager | grep -q "serving on"'
check "no debug line at log-level info" sh -c \
  '[ -z "$(journalctl -u traintld -p debug..debug -o cat --no-pager)" ]'
sed -i 's/^#log-level = info$/log-level = debug/' /etc/traintl/traintld.conf
check "log-level = debug in the config" grep -q '^log-level = debug$' /etc/traintl/traintld.conf
BEFORE=$(prop MainPID)
check "systemctl reload traintld" systemctl reload traintld
check "reloaded without a restart" sh -c "[ \"\$(systemctl show -p MainPID --value traintld)\" = $BEFORE ]"
traintl nodes >/dev/null 2>&1
wait_until 10 "debug lines reach the journal with priority 7" sh -c \
  'journalctl -u traintld -p debug..debug -o cat --no-pager | grep -q "http:"'

say "== the watchdog restarts a wedged daemon"
mkdir -p /etc/systemd/system/traintld.service.d
printf '[Service]\nWatchdogSec=2\nTimeoutAbortSec=2\n' >/etc/systemd/system/traintld.service.d/test.conf
systemctl daemon-reload
check "restart with WatchdogSec=2" systemctl restart traintld
OLD=$(prop MainPID)
RESTARTS=$(prop NRestarts)
check "freeze its event loop (SIGSTOP)" kill -STOP "$OLD"
wait_until 60 "systemd restarts it (watchdog timeout)" sh -c \
  "[ \"\$(systemctl show -p NRestarts --value traintld)\" -gt $RESTARTS ] && [ \"\$(systemctl show -p SubState --value traintld)\" = running ] && [ \"\$(systemctl show -p MainPID --value traintld)\" != $OLD ]"
check "the journal names the watchdog" sh -c \
  'journalctl -u traintld --no-pager | grep -qi "watchdog timeout"'
rm -rf /etc/systemd/system/traintld.service.d
systemctl daemon-reload
check "restart with the packaged unit" systemctl restart traintld

say "== the SDK packages; a training library built against them, trained by the service"
LIB_DEBS=$(ls /mnt/deb/libtraintl-*_amd64.deb 2>/dev/null)
# shellcheck disable=SC2086
check "dpkg -i the library and SDK packages" dpkg -i $LIB_DEBS /mnt/deb/traintl-dev_*_amd64.deb
if echo "$LIB_DEBS" | grep -q libtraintl-torch; then
  check "libtraintl_torch is in the linker's cache (ldconfig trigger)" sh -c \
    'ldconfig -p | grep -q "libtraintl_torch.so.[0-9]"'
fi
rm -rf /root/sdk-example
cp -r /usr/share/doc/traintl-dev/examples/sdk-example /root/sdk-example
cd /root/sdk-example || fail "cd"
check "cmake + build of the example" sh -c \
  'cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build >/dev/null'
check "traintl submit job.json --wait (workers start under the sandbox)" \
  traintl submit job.json --wait
cd / || fail "cd /"

if ls /mnt/deb/python3-traintl_*_amd64.deb >/dev/null 2>&1; then
  say "== python3-traintl: a Python training function"
  check "dpkg -i python3-traintl" dpkg -i /mnt/deb/python3-traintl_*_amd64.deb
  mkdir -p /root/pyjob
  printf '%s\n' 'from traintl import train' '' '' 'def train_func(config):' \
    '    for i in range(3):' '        train.report({"loss": 1.0 / (i + 1)})' >/root/pyjob/train.py
  printf '%s\n' '{"name": "py", "entrypoint": {"python": "train:train_func", "working_dir": "."},' \
    ' "scaling_config": {"num_workers": 1, "resources_per_worker": {"CPU": 1}}}' \
    >/root/pyjob/job.json
  check "traintl submit of a Python function --wait" \
    sh -c 'cd /root/pyjob && traintl submit job.json --wait'
fi

say "== remove and purge"
check "dpkg -r the SDK, library and Python packages" \
  dpkg -r traintl-dev python3-traintl $(dpkg-query -W -f '${Package}\n' 'libtraintl-*')
check "dpkg -r traintl" dpkg -r traintl
check "removing stopped the service" sh -c '! pgrep -x traintld'
check "dpkg -P traintl" dpkg -P traintl
check "purge deleted /var/lib/traintl" sh -c '[ ! -e /var/lib/traintl ]'

say "ALL OK"
exit 0
