#!/usr/bin/env bash
# Builds everything and runs every test (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
jobs=$(nproc)
# STRATA_UNITY_CLI: a from-scratch build compiles CLI11 twice instead of sixteen times
# (tools/strata/CMakeLists.txt).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_UNITY_CLI=ON >/dev/null
cmake --build build -j "$jobs"
cd build
ctest --output-on-failure -j "$jobs" "$@"
