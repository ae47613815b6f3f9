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
# OpenMP threads sleep at a barrier instead of spinning (as `strata run` sets for itself): a
# test's kernels call OpenBLAS, whose own threads then need the cores that spinning OpenMP
# threads hold. ModelTraining.InitialLossIsLogVocabAndFalls alone on a 2-core machine: 9.9 s
# wall (12.0 s CPU) spinning, 2.5 s (3.2 s CPU) passive; beside another test under ctest -j2
# it took 22 s in one run of the suite and 46 s in the next.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
ctest --output-on-failure -j "$jobs" "$@"
