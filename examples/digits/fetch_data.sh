#!/bin/bash
# Fetches the UCI optical digits (1797 8x8 images: 64 features 0..16, then the label) as
# <out_dir>/digits.csv, from the copy inside Debian's python3-sklearn package. Nothing is
# installed: the package is downloaded and unpacked into a temporary directory.
# Usage: examples/digits/fetch_data.sh <out_dir>
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 <out_dir>" >&2
  exit 2
fi
out_dir=$1
mkdir -p "$out_dir"
if [[ -s "$out_dir/digits.csv" ]]; then
  echo "$out_dir/digits.csv already exists"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# apt-get download writes to the current directory; _apt may not be able to, which only
# produces a warning.
(cd "$tmp" && apt-get download python3-sklearn >/dev/null)
deb=$(ls "$tmp"/python3-sklearn_*.deb)
dpkg-deb -x "$deb" "$tmp/root"
src=$(find "$tmp/root" -path '*/sklearn/datasets/data/digits.csv.gz' | head -n 1)
if [[ -z "$src" ]]; then
  echo "digits.csv.gz not found in $(basename "$deb")" >&2
  exit 1
fi
gunzip -c "$src" >"$out_dir/digits.csv.tmp"
mv "$out_dir/digits.csv.tmp" "$out_dir/digits.csv"
rows=$(wc -l <"$out_dir/digits.csv")
echo "wrote $out_dir/digits.csv ($rows rows)"
