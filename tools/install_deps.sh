#!/usr/bin/env bash
# Installs what strata needs on a fresh Debian machine, and nothing when it is already there
# (then it runs no apt-get at all). Root (or sudo) is needed only when something is missing or
# the package lists have to be read anew.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libfmt-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libopenmpi-dev openmpi-bin liburing-dev libomp-dev fio
  libboost-graph-dev
  python3-matplotlib  # `strata plot` (tools/plot_run.py)
  zlib1g-dev  # the plot test reads the PNGs back (tests/tools/png_image.h)
  iproute2  # `ip netns`: the simulated nodes of the multi-node tests (tools/sim_nodes.sh)
  slurm-wlm  # slurmctld, slurmd, srun: the real srun test (tests/tools/slurm_srun_test.sh)
)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
lists_updated=0
update_lists() {
  $SUDO apt-get update -qq
  lists_updated=1
}
# PyTorch for the checks of both backends against GPT-2 in plain PyTorch
# (tools/check_against_pytorch.py). Debian's build; not every release or architecture has
# it. A fresh image's package lists can be empty, and then apt-cache knows no python3-torch
# although the release has it: read the lists anew before deciding it is not there (an
# installed python3-torch is known without lists, so an installed machine skips this).
torch_known() { apt-cache show python3-torch >/dev/null 2>&1; }
torch=0
torch_known && torch=1
if ((!torch)); then
  echo "install_deps: python3-torch is not in the package lists; reading them anew" >&2
  update_lists || echo "install_deps: apt-get update failed; going on with the lists as they are" >&2
  torch_known && torch=1
fi
if ((torch)); then
  packages+=(python3-torch)
else
  echo "install_deps: this release has no python3-torch: the PyTorch checks will skip (fail under CI=true)" >&2
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install_deps: installing ${missing[*]}" >&2
((lists_updated)) || update_lists
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
