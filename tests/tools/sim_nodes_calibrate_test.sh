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
#      DP comm (inter_node_share.h).
# Skipped (exit 77, with the reason) where namespaces cannot be made, as sim_nodes_test.sh.
# Usage: sim_nodes_calibrate_test.sh STRATA_BINARY SIM_NODES_SH WORK_DIR
set -uo pipefail
strata=$1
sim=$2
work=$3
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || skip "needs root to make network namespaces (ip netns)"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
command -v mpirun >/dev/null || skip "no mpirun"
command -v jq >/dev/null || skip "no jq"
command -v nsenter >/dev/null && command -v unshare >/dev/null || skip "no nsenter/unshare (util-linux)"
probe="snc$$"
ip netns add "$probe" 2>/dev/null || skip "cannot create a network namespace here (no CAP_SYS_ADMIN/CAP_NET_ADMIN?)"
ip netns del "$probe"

rm -rf "$work"
mkdir -p "$work"
state="$work/sc$(($$ % 100000))"  # its name prefixes the namespaces: at most 8 characters
trap '"$sim" down "$state"; rm -rf "$work"' EXIT
SIM_NODES_KEEP="$strata:$sim" "$sim" up "$state" 2 || fail "sim_nodes.sh up"
sed 's/slots=1/slots=2/' "$state/hostfile" > "$work/hostfile"

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
echo "PASSED"
