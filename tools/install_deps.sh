#!/usr/bin/env bash
# Installs what strata needs on a fresh Debian machine, and nothing when it is already there.
# Root (or sudo) is needed only when a package is missing.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libfmt-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libopenmpi-dev openmpi-bin liburing-dev libomp-dev fio
)
# PyTorch for the check of the CPU backend against GPT-2 in plain PyTorch
# (tools/check_against_pytorch.py). Debian's build; guarded because not every release or
# architecture has it: without it that one test skips, everything else is unaffected.
if apt-cache show python3-torch >/dev/null 2>&1; then
  packages+=(python3-torch)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install_deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
