#!/usr/bin/env bash
# Simulated nodes on one Linux machine, for testing `strata run` across nodes: N "nodes",
# each a network namespace (`ip netns`) with its own hostname (UTS namespace) and its own
# /tmp and /dev/shm (tmpfs in a mount namespace of its own), joined by a bridge in a hub namespace
# through veth pairs, on addresses of 10.213.0.0/24 (used only inside these namespaces).
# Nothing of the machine's own network is touched. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN).
#
#   sim_nodes.sh up STATE N      make nodes <p>-node0 .. <p>-node<N-1> (p: STATE's basename),
#                                STATE/hostfile (one slot each; edit for more) and
#                                STATE/agent, an rsh agent for Open MPI that enters a node's
#                                namespaces instead of ssh (OMPI_MCA_plm_rsh_agent=STATE/agent)
#   sim_nodes.sh exec STATE NODE CMD...   run CMD on node NODE (its index)
#   sim_nodes.sh kill STATE NODE every process on node NODE, SIGKILL (a node lost)
#   sim_nodes.sh cut STATE NODE  take node NODE's link down (a node that stops answering)
#   sim_nodes.sh down STATE      remove everything `up` made (safe to repeat)
#
# Each node is held by one process (`sleep infinity` inside unshare --uts --mount): its
# mount and UTS namespaces live as long as it does; `exec` enters them with nsenter. The
# nodes resolve each other's names through an /etc/hosts of their own (bind-mounted).
set -euo pipefail

die() { echo "sim_nodes.sh: $*" >&2; exit 2; }
[[ $# -ge 2 ]] || die "usage: sim_nodes.sh up|exec|kill|down STATE ..."
cmd=$1
state=$(realpath -m "$2")
prefix=$(basename "$state")
shift 2

node_name() { echo "${prefix}-node$1"; }
holder_pid() { cat "$state/node$1.pid" 2>/dev/null || die "no node $1 under $state"; }

down() {
  local n
  for pidfile in "$state"/node*.pid; do
    [[ -e $pidfile ]] || continue
    n=$(basename "$pidfile" .pid); n=${n#node}
    # Every process of the node's network namespace, then the holder.
    ip netns pids "$(node_name "$n")" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    kill -9 "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}-(node[0-9]+|hub)$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true  # the veths and the bridge go with them
    rmdir "/run/strata-sim-nodes/$ns.tmp" 2>/dev/null || true
  done
  rm -rf "$state"
}

up() {
  local nodes=$1
  [[ $nodes =~ ^[0-9]+$ && $nodes -ge 1 && $nodes -le 16 ]] || die "up: N '$nodes', expected 1..16"
  # What stays the machine's own on every node although it lies under /tmp (which each node
  # replaces by its own): the top directory under /tmp of STATE and of every path in
  # SIM_NODES_KEEP (colon-separated: the build and the sources, when a checkout is under /tmp).
  local keep="" path top
  IFS=: read -r -a paths <<< "$state:${SIM_NODES_KEEP:-}"
  for path in "${paths[@]}"; do
    [[ -n $path ]] || continue
    path=$(realpath -m "$path")
    [[ $path == /tmp/* ]] || continue
    top=${path#/tmp/}; top="/tmp/${top%%/*}"
    [[ " $keep " == *" $top "* ]] || keep="$keep $top"
  done
  [[ $keep != *"'"* ]] || die "up: a kept path contains a quote: $keep"
  [[ ${#prefix} -le 8 ]] || die "up: STATE's name '$prefix' is longer than 8 characters (interface names)"
  mkdir -p "$state"
  local hub="${prefix}-hub"
  ip netns add "$hub"
  ip -n "$hub" link add br0 type bridge
  ip -n "$hub" link set br0 up
  : > "$state/hosts"
  echo "127.0.0.1 localhost" >> "$state/hosts"
  : > "$state/hostfile"
  for ((i = 0; i < nodes; i++)); do
    echo "10.213.0.$((i + 1)) $(node_name "$i")" >> "$state/hosts"
    echo "$(node_name "$i") slots=1" >> "$state/hostfile"
  done
  for ((i = 0; i < nodes; i++)); do
    local ns; ns=$(node_name "$i")
    ip netns add "$ns"
    ip link add "${prefix}h$i" netns "$hub" type veth peer name eth0 netns "$ns"
    ip -n "$hub" link set "${prefix}h$i" master br0 up
    ip -n "$ns" addr add "10.213.0.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    # The holder: own hostname, own /tmp and /etc/hosts, in the node's network namespace; the
    # kept directories bound back into its /tmp from the machine's (seen at $orig first).
    local orig="/run/strata-sim-nodes/$ns.tmp"
    mkdir -p "$orig"
    ip netns exec "$ns" unshare --uts --mount --propagation private -- sh -c "
      hostname '$ns' && mount --bind '$state/hosts' /etc/hosts &&
      mount --bind /tmp '$orig' &&
      mount -t tmpfs -o size=256m tmpfs /tmp && mount -t tmpfs -o size=256m tmpfs /dev/shm &&
      for k in $keep; do mkdir -p \"\$k\" && mount --bind '$orig'\"\${k#/tmp}\" \"\$k\" || exit 1; done &&
      exec sleep infinity" &
    echo $! > "$state/node$i.pid"
  done
  # Ready when every holder has its hostname (its mounts come before it).
  for ((i = 0; i < nodes; i++)); do
    for ((t = 0; t < 100; t++)); do
      [[ $(nsenter -t "$(holder_pid "$i")" --uts hostname 2>/dev/null) == "$(node_name "$i")" ]] && break
      sleep 0.05
    done
    [[ $(nsenter -t "$(holder_pid "$i")" --uts hostname 2>/dev/null) == "$(node_name "$i")" ]] ||
      die "node $i did not come up"
  done
  # Open MPI's rsh agent: called as `agent HOST COMMAND...` (the command as ssh would pass
  # it to a remote shell).
  cat > "$state/agent" <<EOF
#!/bin/sh
host=\$1; shift
case "\$host" in ${prefix}-node*) ;; *) echo "sim_nodes agent: unknown host \$host" >&2; exit 255 ;; esac
pid=\$(cat "$state/node\${host#${prefix}-node}.pid") || exit 255
exec nsenter -t "\$pid" --net --mount --uts -- sh -c "\$*"
EOF
  chmod +x "$state/agent"
}

case $cmd in
  up)
    [[ $# -eq 1 ]] || die "usage: sim_nodes.sh up STATE N"
    trap 'status=$?; [[ $status -eq 0 ]] || down; exit $status' EXIT  # all or nothing
    up "$1" ;;
  exec)
    [[ $# -ge 2 ]] || die "usage: sim_nodes.sh exec STATE NODE CMD..."
    pid=$(holder_pid "$1"); shift
    exec nsenter -t "$pid" --net --mount --uts -- "$@" ;;
  kill)
    [[ $# -eq 1 ]] || die "usage: sim_nodes.sh kill STATE NODE"
    ip netns pids "$(node_name "$1")" | grep -vx "$(holder_pid "$1")" | xargs -r kill -9 ;;
  cut)
    [[ $# -eq 1 ]] || die "usage: sim_nodes.sh cut STATE NODE"
    holder_pid "$1" > /dev/null
    ip -n "$(node_name "$1")" link set eth0 down ;;
  down) down ;;
  *) die "unknown command '$cmd': up, exec, kill, cut or down" ;;
esac
