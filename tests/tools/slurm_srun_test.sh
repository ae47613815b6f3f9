#!/usr/bin/env bash
# `strata run` under a real `srun`: a one-machine SLURM cluster of its own (slurmctld and
# slurmd under a temporary slurm.conf: one node of 2 CPUs named for this host, ports of its
# own, auth/none, so no munge), then
#   1. srun -N1 -n2 --mpi=pmix strata run tiny-dp2: strata runs as it is under srun (no
#      mpirun of its own) and trains the losses of the same plan launched by strata on one
#      machine (the same arithmetic in the same order: equal to the printed digits);
#   2. srun -n2 with a 1-rank plan (tiny-single): exit 2 before any step, naming srun.
# The daemons it started are stopped, by their pids, and its directory removed, even on
# failure. Skipped (exit 77, with the reason) without root or without slurm-wlm installed.
# Usage: slurm_srun_test.sh STRATA_BINARY WORK_DIR
set -uo pipefail
strata=$1
work=$2
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || skip "needs root to start slurmd"
for tool in slurmctld slurmd srun sinfo; do
  command -v $tool >/dev/null || skip "no $tool (Debian: apt-get install slurm-wlm)"
done
[[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so || -n $(find / -xdev -name mpi_pmix.so -path '*slurm*' -print -quit 2>/dev/null) ]] ||
  skip "slurm has no mpi/pmix plugin (Open MPI's ranks would not find each other)"

rm -rf "$work"
mkdir -p "$work/state" "$work/spool"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
host=$(hostname -s)
port=$((20000 + ($$ % 20000) * 2))  # two ports of this test's own
cat > "$work/slurm.conf" <<CONF
ClusterName=stratatest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=strata Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$work/slurm.conf"
slurmctld -D -f "$SLURM_CONF" > "$work/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$host" > "$work/slurmd.out" 2>&1 &
pids+=($!)
for ((i = 0; i < 100; i++)); do
  [[ $(sinfo -h -o %t 2>/dev/null) == idle ]] && break
  sleep 0.1
done
[[ $(sinfo -h -o %t 2>/dev/null) == idle ]] ||
  fail "the SLURM node did not come up: $(sinfo 2>&1; tail -5 "$work"/*.log "$work"/*.out)"

export OMP_NUM_THREADS=1
run_args=(run --model tiny --train tiny --no-profile --steps 2)
losses() { grep -o '"loss": *[-0-9.e]*' "$1/metrics.jsonl" | sed 's/.*: *//'; }

# 1. tiny-dp2 under srun against strata's own launch.
"$strata" "${run_args[@]}" --plan tiny-dp2 --out "$work/own" > "$work/own.log" 2>&1 ||
  fail "tiny-dp2 launched by strata: $(cat "$work/own.log")"
timeout 60 srun -N1 -n2 --mpi=pmix "$strata" "${run_args[@]}" --plan tiny-dp2 --out "$work/srun" \
  > "$work/srun.log" 2>&1 || fail "tiny-dp2 under srun: $(cat "$work/srun.log")"
[[ $(grep -c "^strata run:" "$work/srun.log") -eq 1 ]] ||
  fail "under srun: expected one run line (rank 0's), got: $(cat "$work/srun.log")"
own=$(losses "$work/own")
under=$(losses "$work/srun")
[[ $(echo "$own" | wc -l) -eq 2 ]] || fail "expected 2 losses, got: $own"
[[ "$own" == "$under" ]] || fail "losses under srun [$under] differ from strata's launch [$own]"
echo "tiny-dp2 under srun -N1 -n2: losses $(echo $under), as strata's own launch"

# 2. A 1-rank plan on a 2-task step: exit 2 before any step.
timeout 60 srun -N1 -n2 --mpi=pmix "$strata" "${run_args[@]}" --plan tiny-single --out "$work/bad" \
  > "$work/bad.log" 2>&1
code=$?
[[ $code -eq 2 ]] || fail "tiny-single under srun -n2: exit $code, expected 2: $(cat "$work/bad.log")"
grep -q "srun" "$work/bad.log" || fail "tiny-single under srun -n2: the message does not name srun: $(cat "$work/bad.log")"
[[ ! -e "$work/bad/metrics.jsonl" ]] || fail "tiny-single under srun -n2: a step ran"
echo "tiny-single under srun -n2: exit 2, $(grep -m1 -o "strata: .*" "$work/bad.log" | head -c 200)"
echo "PASSED"
