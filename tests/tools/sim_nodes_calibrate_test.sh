#!/usr/bin/env bash
# `strata calibrate --hostfile` on 2 simulated nodes of 2 slots (tools/sim_nodes.sh: network
# namespaces joined by veth pairs, so the ranks of one node talk through shared memory and
# the two nodes through TCP):
#   1. the profile holds both links: all-reduce, reduce-scatter, all-gather and p2p over 2
#      ranks inside node0 ("intra_node") and over one rank per node ("inter_node"), each with
#      a positive, finite bus bandwidth and a non-negative latency;
#   2. `predict` prices tiny-dp2 on 2 nodes of 1 GPU (its DP pair across them) on the
#      inter-node figures: dividing only the inter-node bandwidths by 8 raises its DP comm,
#      dividing only the intra-node ones leaves it as it was; its inter_node_comm_s is its
#      DP comm (inter_node_share.h);
#   3. on 3 nodes of 1 slot, the inter-node link alone: all-reduce, reduce-scatter and
#      all-gather over the 3 ranks, and p2p (2 ranks) from the ring's hops between the nodes
#      (node_collectives.h: the slowest of node0->1, 1->2, 2->0); no intra-node fits (a
#      warning says why).
# Skipped (exit 77, with the reason) where namespaces cannot be made, as sim_nodes_test.sh.
# Usage: sim_nodes_calibrate_test.sh STRATA_BINARY SIM_NODES_SH WORK_DIR
set -uo pipefail
strata=$1
sim=$2
work=$3
# shellcheck source=tests/tools/sim_nodes_prereqs.sh
source "$(dirname "$0")/sim_nodes_prereqs.sh"
require_sim_nodes jq

rm -rf "$work"
mkdir -p "$work"
state="$work/sc$(($$ % 100000))"  # its name prefixes the namespaces: at most 8 characters
trap '"$sim" down "$state"; rm -rf "$work"' EXIT
# Three nodes: the first two (2 slots each) for parts 1 and 2, all three (1 slot) for part 3.
SIM_NODES_KEEP="$strata:$sim" "$sim" up "$state" 3 || fail "sim_nodes.sh up"
head -2 "$state/hostfile" | sed 's/slots=1/slots=2/' > "$work/hostfile"

export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# 1. Calibrated from node0; Open MPI reaches node1 through the agent. The cache stays out.
start=$(date +%s.%N)
"$sim" exec "$state" 0 env STRATA_CACHE_DIR=off OMPI_MCA_plm_rsh_agent="$state/agent" \
  "$strata" calibrate --quick --model tiny --hostfile "$work/hostfile" --out "$work/profile.json" \
  > "$work/calibrate.log" 2>&1 || fail "calibrate on two nodes: $(cat "$work/calibrate.log")"
took=$(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $start }")
profile="$work/profile.json"
for link in intra_node inter_node; do
  ops=$(jq -r --arg l "$link" '[.collectives[] | select(.link == $l) | .op] | sort | join(",")' "$profile")
  [[ $ops == "all_gather,all_reduce,p2p,reduce_scatter" ]] ||
    fail "$link: expected the four ops, got '$ops': $(cat "$profile")"
  bad=$(jq -r --arg l "$link" '.collectives[] | select(.link == $l) |
          select(.ranks != 2 or (.bus_bandwidth_bytes_per_s | type) != "number" or
                 .bus_bandwidth_bytes_per_s <= 0 or .bus_bandwidth_bytes_per_s > 1e18 or
                 .latency_s < 0) | .op' "$profile")
  [[ -z $bad ]] || fail "$link: fits with a bad rank count, bandwidth or latency: $bad: $(cat "$profile")"
done
[[ -z $(ls "$work" | grep '\.tmp') ]] || fail "scratch files left: $(ls "$work")"
echo "calibrated on two nodes in $took s: $(jq -r '.collectives[] | select(.op == "all_reduce") |
  "\(.link) all-reduce x\(.ranks) \(.bus_bandwidth_bytes_per_s / 1e9 | . * 100 | round / 100) GB/s"' "$profile" | tr '\n' ';')"

# 2. The inter-node fits price a DP pair across nodes, the intra-node ones do not.
scaled() {  # scaled LINK OUT: the profile with LINK's bandwidths divided by 8
  jq --arg l "$1" '.collectives |= map(if .link == $l then .bus_bandwidth_bytes_per_s /= 8 else . end)' \
    "$profile" > "$2"
}
scaled inter_node "$work/slow-inter.json"
scaled intra_node "$work/slow-intra.json"
predict() {  # predict PROFILE: "dp_comm_s inter_node_comm_s" of tiny-dp2 on 2 nodes of 1
  "$strata" predict --model tiny --train tiny --plan tiny-dp2 --cluster local-cpu --nodes 2 \
    --gpus-per-node 1 --profile "$1" --json > "$work/predict.json" 2> "$work/predict.err" ||
    fail "predict with $1: $(cat "$work/predict.err")"
  jq -r '"\(.parts.dp_comm_s) \(.inter_node_comm_s)"' "$work/predict.json"
}
read -r dp inter <<< "$(predict "$profile")"
read -r dp_slow_inter _ <<< "$(predict "$work/slow-inter.json")"
read -r dp_slow_intra _ <<< "$(predict "$work/slow-intra.json")"
awk "BEGIN { exit !($dp > 0) }" || fail "tiny-dp2 across nodes: no DP comm predicted ($dp)"
[[ $inter == "$dp" ]] || fail "inter_node_comm_s $inter, expected the DP comm $dp"
awk "BEGIN { exit !($dp_slow_inter > $dp) }" ||
  fail "inter-node bandwidth / 8: DP comm $dp_slow_inter s, expected more than $dp s"
[[ $dp_slow_intra == "$dp" ]] ||
  fail "intra-node bandwidth / 8: DP comm $dp_slow_intra s, expected it unchanged ($dp s)"
echo "tiny-dp2 across 2 nodes: DP comm $dp s; inter-node bandwidth / 8: $dp_slow_inter s; intra-node / 8: $dp_slow_intra s"

# 3. Three nodes: p2p across nodes from the ring's hops. Three ranks share this VM's two
# cores: waiting ranks must yield them (Open MPI polls busily otherwise: the 3-rank
# collectives then took 94 s, not 9 s, and timed the polling).
"$sim" exec "$state" 0 env STRATA_CACHE_DIR=off OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_plm_rsh_agent="$state/agent" \
  "$strata" calibrate --quick --model tiny --hostfile "$state/hostfile" --out "$work/profile3.json" \
  > "$work/calibrate3.log" 2>&1 || fail "calibrate on three nodes: $(cat "$work/calibrate3.log")"
fits3=$(jq -r '[.collectives[] | "\(.link) \(.op) \(.ranks)"] | sort | join(",")' "$work/profile3.json")
want3="inter_node all_gather 3,inter_node all_reduce 3,inter_node p2p 2,inter_node reduce_scatter 3"
[[ $fits3 == "$want3" ]] || fail "three nodes: expected fits [$want3], got [$fits3]"
bad3=$(jq -r '.collectives[] | select((.bus_bandwidth_bytes_per_s | type) != "number" or
                .bus_bandwidth_bytes_per_s <= 0 or .bus_bandwidth_bytes_per_s > 1e18 or
                .latency_s < 0) | .op' "$work/profile3.json")
[[ -z $bad3 ]] || fail "three nodes: fits with a bad bandwidth or latency: $bad3: $(cat "$work/profile3.json")"
grep -q "no intra_node collectives measured" "$work/calibrate3.log" ||
  fail "three nodes of 1 slot: expected the warning that no node holds two ranks: $(cat "$work/calibrate3.log")"
echo "three nodes: inter-node p2p (slowest hop) $(jq -r '.collectives[] | select(.op == "p2p") |
  "\(.bus_bandwidth_bytes_per_s / 1e9 | . * 100 | round / 100) GB/s, \(.latency_s * 1e6 | round) us"' "$work/profile3.json")"
echo "PASSED"
