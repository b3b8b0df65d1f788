#!/bin/bash
# Fetches Debian's Prometheus server as <out_dir>/prometheus for the e2e test that scrapes
# a daemon with it (tests/e2e/test_metrics.py). Nothing is installed (no service that
# would listen on every interface): the package is downloaded and its binary unpacked.
# Usage: scripts/fetch_prometheus.sh <out_dir>
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 <out_dir>" >&2
  exit 2
fi
out_dir=$1
mkdir -p "$out_dir"
if [[ -x "$out_dir/prometheus" ]]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# apt-get download writes to the current directory; _apt may not be able to, which only
# produces a warning.
(cd "$tmp" && apt-get download prometheus >/dev/null 2>&1)
dpkg-deb -x "$(ls "$tmp"/prometheus_*.deb)" "$tmp/root"
cp "$tmp/root/usr/bin/prometheus" "$out_dir/prometheus.tmp"
mv "$out_dir/prometheus.tmp" "$out_dir/prometheus"
echo "wrote $out_dir/prometheus ($("$out_dir/prometheus" --version 2>&1 | head -n 1))"
