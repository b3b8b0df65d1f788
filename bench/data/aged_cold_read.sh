#!/usr/bin/env bash
# Shows how long a cold read takes right after its file was evicted from the page cache and
# AGE seconds after (bench.py's "aged" rows; RESULTS.md, "cold reads on a VM"), with cat.
#
#   bench/data/aged_cold_read.sh FILE [ROUNDS [AGE]]
#
# On a VM whose balloon device reports free memory to the hypervisor (virtio-balloon free
# page reporting, enabled when bit 5 of its features is set: grep . /sys/bus/virtio/devices/
# */features), the pages an eviction frees go back to the host about 2 s later; a cold read
# that fills the page cache with them pays a host fault on the first touch of every page.
# Any user who can read FILE can run it: the eviction is posix_fadvise(DONTNEED) on a
# read-only descriptor (clean pages that no process has mapped leave the page cache).
set -euo pipefail
file=${1:?usage: $0 FILE [ROUNDS [AGE]]}
rounds=${2:-4}
age=${3:-5}
evict() {
  python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$file"
}
for ((i = 1; i <= rounds; i++)); do
  evict
  /usr/bin/time -f "right after the eviction: %e s (system %S s)" cat "$file" >/dev/null
  evict
  sleep "$age"
  /usr/bin/time -f "$age s after the eviction:   %e s (system %S s)" cat "$file" >/dev/null
done
