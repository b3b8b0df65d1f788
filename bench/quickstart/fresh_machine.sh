#!/usr/bin/env bash
# Times scripts/quickstart.sh on a fresh Debian 12: a minimal root made by debootstrap
# (nothing but Debian's minbase and its apt sources), entered with systemd-nspawn, with
# this checkout's committed tree (git archive HEAD) copied in. The clock covers all of
# it: apt-get installing the build dependencies, the build, fetching the data, training
# the example, status and logs. The container shares this machine's CPUs and network (apt
# fetches from deb.debian.org); the quickstart's daemon binds 127.0.0.1 only.
#
#   sudo bench/quickstart/fresh_machine.sh [BASE_DIR]
#
# BASE_DIR (default /var/tmp/traintl-fresh-base) keeps the pristine debootstrap root
# between runs; each run works on a copy, removed at the end. Needs debootstrap and
# systemd-nspawn (apt-get install debootstrap systemd-container).
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC="$PWD"
BASE="${1:-/var/tmp/traintl-fresh-base}"
[ "$(id -u)" -eq 0 ] || { echo "needs root" >&2; exit 1; }
for tool in debootstrap systemd-nspawn; do
  command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }
done
if [ ! -x "$BASE/root/bin/bash" ]; then
  mkdir -p "$BASE"
  echo "== debootstrap --variant=minbase bookworm (once; kept in $BASE)"
  debootstrap --variant=minbase bookworm "$BASE/root" http://deb.debian.org/debian >/dev/null
fi
WORK="$(mktemp -d /var/tmp/traintl-fresh-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cp -a "$BASE/root" "$WORK/root"
# The sources a Debian 12 machine has: the release, its updates and security.
cat >"$WORK/root/etc/apt/sources.list" <<'LIST'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
LIST
mkdir -p "$WORK/root/src"
git -C "$SRC" archive HEAD | tar -x -C "$WORK/root/src"
echo "== quickstart on a fresh Debian 12 ($(nproc) CPUs; commit $(git -C "$SRC" rev-parse --short HEAD))"
start=$(date +%s.%N)
set +e
# A private mount namespace, and no registration with machined (there may be no D-Bus).
unshare -m bash -c 'mount --make-rprivate / && exec systemd-nspawn -q -D "$1" \
  --machine="traintl-fresh-$$" --register=no --keep-unit --link-journal=no --pipe \
  --setenv=DEBIAN_FRONTEND=noninteractive bash -c "cd /src && scripts/quickstart.sh"' \
  _ "$WORK/root" >"$WORK/quickstart.log" 2>&1
rc=$?
set -e
end=$(date +%s.%N)
# Kept for the next analysis: which steps the build spent its time on.
cp "$WORK/root/src/build/.ninja_log" "${BASE}/last.ninja_log" 2>/dev/null &&
  echo "(the build's step timings: ${BASE}/last.ninja_log)"
grep -E "^== |install-deps|SUCCEEDED|FAILED|accuracy" "$WORK/quickstart.log" | head -40 || true
tail -5 "$WORK/quickstart.log"
awk -v s="$start" -v e="$end" -v rc="$rc" \
  'BEGIN { printf "quickstart on a fresh machine: %.0f s (exit %d; target <= 300 s)\n", e - s, rc }'
exit "$rc"
