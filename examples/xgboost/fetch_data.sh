#!/bin/bash
# Writes the Wisconsin breast cancer data (569 tumours, 30 features, label 1 = benign,
# 0 = malignant) as <out_dir>/train.csv and <out_dir>/valid.csv, CSV files with a header
# row (the features' names, then "label"). The data is the copy inside Debian's
# python3-sklearn package: the installed one when the package is installed, else the
# package is downloaded and unpacked into a temporary directory (nothing is installed).
# The split is deterministic: every fifth row (the 5th, 10th, ...) is validation data
# (113 rows), the others are training data (456 rows).
# Usage: examples/xgboost/fetch_data.sh <out_dir>
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 <out_dir>" >&2
  exit 2
fi
out_dir=$1
mkdir -p "$out_dir"
if [[ -s "$out_dir/train.csv" && -s "$out_dir/valid.csv" ]]; then
  echo "$out_dir/train.csv and valid.csv already exist"
  exit 0
fi

installed=/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -r "$installed" ]]; then
  src=$installed
else
  # apt-get download writes to the current directory; _apt may not be able to, which only
  # produces a warning.
  (cd "$tmp" && apt-get download python3-sklearn >/dev/null)
  deb=$(ls "$tmp"/python3-sklearn_*.deb)
  dpkg-deb -x "$deb" "$tmp/root"
  src=$(find "$tmp/root" -path '*/sklearn/datasets/data/breast_cancer.csv' | head -n 1)
  if [[ -z "$src" ]]; then
    echo "breast_cancer.csv not found in $(basename "$deb")" >&2
    exit 1
  fi
fi

# sklearn's first line is "569,30,malignant,benign" (rows, features, class names), not
# column names; its rows are the 30 features, then the class.
header="mean_radius,mean_texture,mean_perimeter,mean_area,mean_smoothness,mean_compactness"
header+=",mean_concavity,mean_concave_points,mean_symmetry,mean_fractal_dimension"
header+=",radius_error,texture_error,perimeter_error,area_error,smoothness_error"
header+=",compactness_error,concavity_error,concave_points_error,symmetry_error"
header+=",fractal_dimension_error,worst_radius,worst_texture,worst_perimeter,worst_area"
header+=",worst_smoothness,worst_compactness,worst_concavity,worst_concave_points"
header+=",worst_symmetry,worst_fractal_dimension,label"
first=$(head -n 1 "$src" | tr -d '\r')
if [[ "$first" != "569,30,malignant,benign" ]]; then
  echo "$src: unexpected first line '$first'" >&2
  exit 1
fi
awk -F, -v header="$header" -v train="$tmp/train.csv" -v valid="$tmp/valid.csv" '
  BEGIN { print header > train; print header > valid }
  NR == 1 { next }
  {
    sub(/\r$/, "")
    if (NF != 31) { printf "line %d has %d fields, not 31\n", NR, NF > "/dev/stderr"; exit 1 }
    if ((NR - 1) % 5 == 0) print > valid; else print > train
  }' "$src"
mv "$tmp/train.csv" "$out_dir/train.csv"
mv "$tmp/valid.csv" "$out_dir/valid.csv"
echo "wrote $out_dir/train.csv ($(($(wc -l <"$out_dir/train.csv") - 1)) rows)" \
  "and $out_dir/valid.csv ($(($(wc -l <"$out_dir/valid.csv") - 1)) rows)"
