# shellcheck shell=bash
# Sourced by the simulated-node tests (sim_nodes_test.sh, sim_nodes_calibrate_test.sh): their
# skip and fail, and the check that namespaces can be made here (tools/sim_nodes.sh needs
# root, iproute2, util-linux's nsenter/unshare and Open MPI), skipping with the reason where
# not: a container without CAP_NET_ADMIN, say.
#   require_sim_nodes [COMMAND...]   also each COMMAND the test itself needs (jq, ...)
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

require_sim_nodes() {
  local c probe="snq$$"
  [[ $(id -u) -eq 0 ]] || skip "needs root to make network namespaces (ip netns)"
  command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
  command -v mpirun >/dev/null || skip "no mpirun"
  for c in "$@"; do command -v "$c" >/dev/null || skip "no $c"; done
  { command -v nsenter >/dev/null && command -v unshare >/dev/null; } || skip "no nsenter/unshare (util-linux)"
  ip netns add "$probe" 2>/dev/null || skip "cannot create a network namespace here (no CAP_SYS_ADMIN/CAP_NET_ADMIN?)"
  ip netns del "$probe"
}
