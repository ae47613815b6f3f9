#!/usr/bin/env bash
# `strata run --hostfile` on 2 simulated nodes (tools/sim_nodes.sh: network namespaces with
# their own hostname and /tmp, Open MPI started through an rsh agent that enters them):
#   1. tiny-dp2 and tiny-pp2 with one rank on each node train the losses of the same plan on
#      one machine (the same arithmetic in the same order: equal to the printed digits);
#      so does t2 d2 on 2 slots each (TP inside a node); tiny-tp2 on 1 slot each (its TP
#      group across the nodes) is exit 2 before launch; an NVMe plan with --nvme-dir /tmp
#      puts each node's files in a directory of its own in its own /tmp;
#   2. an --out on /tmp, which each node has of its own, is exit 2 naming both hosts;
#   3. a node lost mid-run ends the job within --comm-timeout-s + 25 s naming it: its
#      processes killed (strata's line names the rank that ended first and its node; the
#      newest checkpoint the two nodes wrote before resumes on one machine), or its
#      link cut (the survivor's watchdog names the hosts, exit 4, and the launcher ends the
#      mpirun that waits for the lost daemon, naming the rank it never heard from).
# Skipped (exit 77, with the reason) where namespaces cannot be made: not root, no `ip`, no
# mpirun, a container without CAP_NET_ADMIN. Everything it makes goes, even on failure.
# Usage: sim_nodes_test.sh STRATA_BINARY SIM_NODES_SH WORK_DIR
set -uo pipefail
strata=$1
sim=$2
work=$3
# shellcheck source=tests/tools/sim_nodes_prereqs.sh
source "$(dirname "$0")/sim_nodes_prereqs.sh"
require_sim_nodes

rm -rf "$work"
mkdir -p "$work"
state="$work/sn$(($$ % 100000))"  # its name prefixes the namespaces: at most 8 characters
trap '"$sim" down "$state"; rm -rf "$work"' EXIT
# The binary and the sources stay visible on the nodes when a checkout lies under /tmp.
SIM_NODES_KEEP="$strata:$sim" "$sim" up "$state" 2 || fail "sim_nodes.sh up"
node0="$(basename "$state")-node0"
node1="$(basename "$state")-node1"

export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run_args=(run --model tiny --train tiny --no-profile)
# strata launched on node0 with the nodes' hostfile; Open MPI reaches node1 through the agent.
on_nodes() {
  "$sim" exec "$state" 0 env OMPI_MCA_plm_rsh_agent="$state/agent" "$strata" "${run_args[@]}" \
    --hostfile "$state/hostfile" "$@"
}
losses() { grep -o '"loss": *[-0-9.e]*' "$1/metrics.jsonl" | sed 's/.*: *//'; }

# 1. Losses on two nodes against one machine.
for plan in tiny-dp2 tiny-pp2; do
  "$strata" "${run_args[@]}" --steps 3 --plan "$plan" --out "$work/one-$plan" > "$work/one-$plan.log" 2>&1 ||
    fail "$plan on one machine: $(cat "$work/one-$plan.log")"
  on_nodes --steps 3 --plan "$plan" --out "$work/two-$plan" > "$work/two-$plan.log" 2>&1 ||
    fail "$plan on two nodes: $(cat "$work/two-$plan.log")"
  one=$(losses "$work/one-$plan")
  two=$(losses "$work/two-$plan")
  [[ $(echo "$one" | wc -l) -eq 3 ]] || fail "$plan: expected 3 losses on one machine, got: $one"
  [[ "$one" == "$two" ]] || fail "$plan: losses on two nodes differ: one machine [$one], two nodes [$two]"
  echo "$plan: losses on one machine and on two nodes: $(echo $one)"
done

# Nothing left behind on either node: no job directory, no Open MPI session files (the
# machine's own directories kept on the nodes when the checkout is under /tmp aside).
kept=$(for p in "$strata" "$sim" "$state"; do
         p=$(realpath -m "$p")
         if [[ $p == /tmp/* ]]; then p=${p#/tmp/}; echo "${p%%/*}"; fi
       done | sort -u)
for i in 0 1; do
  left=$("$sim" exec "$state" "$i" sh -c 'ls -A /dev/shm /tmp | grep -v "^/\|^$"' |
         grep -vxF -f <(echo "$kept"))
  [[ -z $left ]] || fail "node$i kept files in its /dev/shm or /tmp after the runs: $left"
done
echo "nothing left in either node's /dev/shm or /tmp"

# t2 d2 on 2 nodes of 2 slots: each TP pair inside a node, the DP pairs across.
cat > "$work/t2d2.json" <<'PLAN'
{"tp": 2, "pp": 1, "dp": 2, "virtual_stages": 1, "micro_batch": 1, "schedule": "1f1b",
 "zero_stage": 0, "recompute": "none", "sequence_parallel": false,
 "offload": {"optimizer": "none", "gradients": "none", "params": "none"}}
PLAN
sed 's/slots=1/slots=2/' "$state/hostfile" > "$work/hostfile2"
"$strata" "${run_args[@]}" --steps 3 --plan "$work/t2d2.json" --out "$work/one-t2d2" > "$work/one-t2d2.log" 2>&1 ||
  fail "t2d2 on one machine: $(cat "$work/one-t2d2.log")"
"$sim" exec "$state" 0 env OMPI_MCA_plm_rsh_agent="$state/agent" "$strata" "${run_args[@]}" --steps 3 \
  --plan "$work/t2d2.json" --hostfile "$work/hostfile2" --out "$work/two-t2d2" > "$work/two-t2d2.log" 2>&1 ||
  fail "t2d2 on two nodes: $(cat "$work/two-t2d2.log")"
[[ "$(losses "$work/one-t2d2")" == "$(losses "$work/two-t2d2")" ]] ||
  fail "t2d2: losses on two nodes differ: [$(losses "$work/one-t2d2")] [$(losses "$work/two-t2d2")]"
echo "t2d2 (TP inside each node, DP across): losses on one machine and on two nodes: $(echo $(losses "$work/one-t2d2"))"

# A TP group across the nodes (tiny-tp2 on 1 slot each): exit 2 before anything starts.
on_nodes --steps 3 --plan tiny-tp2 --out "$work/tp-across" > "$work/tp-across.log" 2>&1
code=$?
[[ $code -eq 2 ]] && grep -q "tensor-parallel group of world ranks 0,1 would span nodes (0 on $node0, 1 on $node1)" "$work/tp-across.log" ||
  fail "tiny-tp2 across nodes: exit $code: $(cat "$work/tp-across.log")"
[[ ! -e "$work/tp-across/metrics.jsonl" ]] || fail "tiny-tp2 across nodes: a step ran"
echo "tiny-tp2 across nodes: exit 2 before launch"

# Each node's NVMe files under its own /tmp, in a directory named for it: tiny-dp2 with
# the optimizer state on NVMe and --nvme-dir /tmp (each node's own).
sed 's/"optimizer": "none"/"optimizer": "nvme"/; s/"tp": 2/"tp": 1/' "$work/t2d2.json" > "$work/nvme.json"
on_nodes --steps 2 --plan "$work/nvme.json" --nvme-dir /tmp --out "$work/nvme" > "$work/nvme.log" 2>&1 ||
  fail "NVMe plan on two nodes: $(cat "$work/nvme.log")"
for i in 0 1; do
  mine="/tmp/node-$(basename "$state")-node$i"
  theirs="/tmp/node-$(basename "$state")-node$((1 - i))"
  "$sim" exec "$state" "$i" test -d "$mine" || fail "node$i has no NVMe directory $mine of its own"
  if "$sim" exec "$state" "$i" test -e "$theirs"; then fail "node$i's /tmp holds $theirs"; fi
  [[ ! -e $mine ]] || fail "the NVMe directory $mine is on the real /tmp"
done
echo "NVMe: each node's directory in its own /tmp only"

# 2. A node-local --out: /tmp is each node's own.
on_nodes --steps 3 --plan tiny-dp2 --out /tmp/out > "$work/local-out.log" 2>&1
code=$?
[[ $code -eq 2 ]] || fail "--out /tmp/out on two nodes: exit $code, expected 2: $(cat "$work/local-out.log")"
grep -q "host $node0 does not see what host $node1 writes there" "$work/local-out.log" &&
  grep -q "host $node1 does not see what host $node0 writes there" "$work/local-out.log" ||
  fail "--out /tmp/out: the message does not name both hosts: $(cat "$work/local-out.log")"
echo "--out on /tmp: exit 2, $(grep -o "not one directory.*" "$work/local-out.log" | head -c 200)"

# 3. node1 lost mid-run: `lose HOW` starts a long run, does `sim_nodes.sh HOW` to node1 at
# step 2 (kill: its processes die; cut: its link goes down, nothing of it answers), and
# checks the job ends within --comm-timeout-s + 25 s, not with exit 0. Leaves the output in
# $work/lost-HOW.log, the exit code in $code and the seconds in $took.
timeout_s=5
lose() {
  local how=$1 log="$work/lost-$1.log"
  on_nodes --plan tiny-dp2 --steps 100000 --comm-timeout-s $timeout_s --out "$work/lost-$how" \
    --save "$work/ckpt-$how" --save-every 1 > "$log" 2>&1 &
  local job=$!
  for ((i = 0; i < 600; i++)); do
    grep -q "step *2/" "$log" && break
    kill -0 $job 2>/dev/null || break
    sleep 0.1
  done
  grep -q "step *2/" "$log" || fail "$how: the long run did not reach step 2: $(cat "$log")"
  local start; start=$(date +%s.%N)
  "$sim" "$how" "$state" 1
  local ended=0
  # A loose bound for a shared CI machine (one run missed + 10 s there); the seconds it took
  # are printed below, 10.2-10.4 s for a cut with a 5 s timeout on a quiet machine.
  local limit=$((timeout_s + 25))
  for ((i = 0; i < limit * 10; i++)); do
    kill -0 $job 2>/dev/null || { ended=1; break; }
    sleep 0.1
  done
  [[ $ended -eq 1 ]] || { kill -9 $job; fail "$how: the job still ran $limit s after node1 was lost: $(cat "$log")"; }
  wait $job
  code=$?
  took=$(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $start }")
  [[ $code -ne 0 ]] || fail "$how: the job lost a node but exited 0"
}

lose kill
# strata's own line (mpirun's message names the node only sometimes).
grep -q "strata: rank 1 on host $node1 ended first, without finishing" "$work/lost-kill.log" ||
  fail "kill: the job's message does not name rank 1 on $node1: $(cat "$work/lost-kill.log")"
echo "node1 killed: the job ended with exit $code after $took s: $(grep "ended first" "$work/lost-kill.log")"
# The checkpoints it wrote on two nodes before: the newest complete one resumes on one
# machine under another plan (tiny-single), one step further.
newest=$(ls -d "$work"/ckpt-kill/step-*/ 2>/dev/null | while read -r d; do
  [[ -e $d/manifest.json ]] && basename "$d"; done | sort | tail -1)
[[ -n $newest ]] || fail "kill: no complete checkpoint under $work/ckpt-kill: $(ls -R "$work/ckpt-kill")"
step=$((10#${newest#step-}))
"$strata" "${run_args[@]}" --plan tiny-single --resume "$work/ckpt-kill" --steps $((step + 1)) \
  --out "$work/resumed" > "$work/resumed.log" 2>&1 ||
  fail "resuming $newest on one machine: $(cat "$work/resumed.log")"
grep -q "resumed from .*$newest after step $step" "$work/resumed.log" ||
  fail "resume: no 'resumed from' line: $(cat "$work/resumed.log")"
echo "the checkpoint of step $step written on two nodes resumed on one machine"

lose cut
# The survivor's watchdog after --comm-timeout-s, naming the hosts; then the launcher ends
# the mpirun that waits for node1's daemon, naming the rank it never heard from: exit 4.
[[ $code -eq 4 ]] || fail "cut: exit $code, expected 4: $(cat "$work/lost-cut.log")"
grep -q "waited .* (--comm-timeout-s $timeout_s).*ranks by host: $node0: rank 0, $node1: rank 1" "$work/lost-cut.log" &&
  grep -q "Ranks never heard ending (their node stopped answering?): 1 on $node1" "$work/lost-cut.log" ||
  fail "cut: the messages do not name $node1: $(cat "$work/lost-cut.log")"
echo "node1 cut off: the job ended with exit $code after $took s: $(grep "^strata" "$work/lost-cut.log" | tr '\n' ' ')"
echo "PASSED"
