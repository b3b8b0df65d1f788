#!/bin/bash
# Hierarchical-collectives benchmark: the DDP MLP (784-512-512-10, batch 64 per rank, SGD,
# one intra-op thread per rank) trained by 4 traintl ranks on 2 "nodes", each node a network
# namespace of its own holding 2 ranks, the namespaces joined by a veth pair. Compares
# traintl's hierarchical group ("shm+gloo": shared memory inside a node, Gloo between one
# leader per node over the veth) against flat Gloo (TRAINTL_SHM_COLLECTIVES=0: all 4 ranks
# in Gloo). Rounds alternate which variant goes first; the result is the ratio of medians,
# written to bench/ddp/HIER_RESULTS.md.
#
# Usage: bench/ddp/hier.sh [BUILD_DIR=build] [ROUNDS=3]   (env STEPS, default 300)
#   needs: root (ip netns), iproute2, cmake --build BUILD_DIR --target ddp_bench
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
rounds=${2:-3}
steps=${STEPS:-300}
bench=$build/bin/ddp_bench
[[ -x $bench ]] || { echo "missing $bench (cmake --build $build --target ddp_bench)" >&2; exit 2; }
bench=$(cd "$(dirname "$bench")" && pwd)/$(basename "$bench")
command -v ip >/dev/null || { echo "needs iproute2 (apt-get install -y iproute2)" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "needs root (ip netns)" >&2; exit 2; }

# Names unique to this run, so that a second copy or a leftover cannot clash; veth names
# stay within the kernel's 15 characters.
ns_a=traintl-hier-a-$$
ns_b=traintl-hier-b-$$
veth_a=tth$$a
veth_b=tth$$b
addr_a=10.77.0.1
addr_b=10.77.0.2

tmp=$(mktemp -d)
pids=()
made_ns=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # Deleting a namespace destroys the veth end inside it and so its peer; the explicit
  # delete covers a pair that was made but not yet moved.
  ip link del "$veth_a" 2>/dev/null || true
  for ns in "${made_ns[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export OMP_NUM_THREADS=1

ip netns add "$ns_a"; made_ns+=("$ns_a")
ip netns add "$ns_b"; made_ns+=("$ns_b")
ip link add "$veth_a" type veth peer name "$veth_b"
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
ip -n "$ns_a" addr add "$addr_a/24" dev "$veth_a"
ip -n "$ns_b" addr add "$addr_b/24" dev "$veth_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up
# Both ends must be up (carrier on) before Gloo binds to them.
for ((t = 0; ; t++)); do
  if ip -n "$ns_a" link show "$veth_a" | grep -q LOWER_UP &&
    ip -n "$ns_b" link show "$veth_b" | grep -q LOWER_UP; then break; fi
  ((t < 50)) || { echo "veth $veth_a/$veth_b did not come up" >&2; exit 1; }
  sleep 0.1
done

# Rank R of 4 in its node's namespace (node R/2), Gloo bound to that namespace's veth. Run
# it with `&`: the exec makes $! the rank's own process chain (ip -> env -> timeout, which
# passes a TERM on to ddp_bench), not a subshell that a kill would leave the rank behind.
rank_cmd() {
  local r=$1 store=$2 ns=$ns_a ifname=$veth_a
  if ((r >= 2)); then ns=$ns_b ifname=$veth_b; fi
  exec ip netns exec "$ns" env GLOO_SOCKET_IFNAME="$ifname" timeout 600 \
    "$bench" train --rank "$r" --world 4 --store "$store" --steps "$steps" --batch 64 \
    --ranks-per-node 2
}

# One 4-rank training run; $1 is the backend rank 0 must report. Sets sps to rank 0's
# steps/s (per rank). Not run in a $(...) subshell, so that cleanup sees the ranks' pids.
run4() {
  local want=$1 store=$tmp/store.$RANDOM$RANDOM r rc=0 out
  # All 4 in the background: a signal's trap runs during `wait`, not under a foreground child.
  for r in 0 1 2 3; do
    rank_cmd "$r" "$store" >"$tmp/r$r.out" 2>&1 &
    pids+=($!)
  done
  for r in 0 1 2 3; do wait "${pids[$r]}" || rc=$?; done
  pids=()
  out=$(cat "$tmp/r0.out")
  local got
  got=$(awk '/^backend/ {print $2}' <<<"$out")
  sps=$(awk '/^steps_per_s/ {print $2}' <<<"$out")
  if ((rc != 0)) || [[ $got != "$want" || -z $sps ]]; then
    {
      echo "FAILED: wanted backend '$want', rank 0 printed backend '$got' (exit status $rc)"
      for r in 0 1 2 3; do echo "--- rank $r:"; cat "$tmp/r$r.out"; done
    } >&2
    exit 1
  fi
}
hier_run() { run4 shm+gloo; }
flat_run() { TRAINTL_SHM_COLLECTIVES=0 run4 gloo; }

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
med() { printf '%s\n' "$@" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

hier=() flat=() paired=()
for ((i = 1; i <= rounds; i++)); do
  if ((i % 2 == 1)); then
    hier_run; h=$sps
    flat_run; f=$sps
    first=hier
  else
    flat_run; f=$sps
    hier_run; h=$sps
    first=flat
  fi
  echo "round $i ($first first): shm+gloo $h, flat gloo $f steps/s (per rank)"
  hier+=("$h"); flat+=("$f"); paired+=("$(ratio "$h" "$f")")
done
hier_med=$(med "${hier[@]}")
flat_med=$(med "${flat[@]}")
r=$(ratio "$hier_med" "$flat_med")
paired_med=$(med "${paired[@]}")
echo "hierarchical (shm+gloo) $hier_med steps/s, flat gloo $flat_med steps/s (per rank, medians of $rounds)"
echo "ratio hierarchical/flat $r (median of per-round ratios $paired_med)"

cat >"$here/HIER_RESULTS.md" <<MD
# Hierarchical collectives benchmark results

Written by \`bench/ddp/hier.sh $build $rounds\` on $(date -u '+%Y-%m-%d %H:%M UTC') ($(getconf _NPROCESSORS_ONLN) CPUs, $(uname -r);
load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)).

4 ranks of DDP training (MLP 784-512-512-10, batch 64 per rank, SGD, one intra-op thread
per rank, $steps steps) on 2 "nodes": 2 network namespaces joined by a veth pair
($addr_a/24, $addr_b/24), 2 ranks in each, Gloo bound to the veth (GLOO_SOCKET_IFNAME).
This is 4 ranks on $(getconf _NPROCESSORS_ONLN) cores, so the absolute numbers are low; only the ratio matters.

| what | steps/s per rank (median of $rounds rounds) | ratio hierarchical / flat |
|---|---|---|
| hierarchical: shm inside a node + Gloo between node leaders (backend \`shm+gloo\`) | $hier_med | **$r** (median of per-round ratios: $paired_med) |
| flat Gloo, all 4 ranks (TRAINTL_SHM_COLLECTIVES=0, backend \`gloo\`) | $flat_med | 1 |

Rounds alternate which variant goes first. Per-round steps/s (hierarchical, flat):
$(for ((i = 0; i < rounds; i++)); do printf '(%s, %s) ' "${hier[$i]}" "${flat[$i]}"; done)
MD
echo "wrote $here/HIER_RESULTS.md"
