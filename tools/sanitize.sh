#!/usr/bin/env bash
# The CPU tests under AddressSanitizer and UndefinedBehaviorSanitizer: builds build-asan with
# STRATA_SANITIZE=ON (no CUDA, no benchmarks) and runs every test that does not need a GPU or
# PyTorch (the PyTorch check runs strata many times; slow under ASan and no more code covered).
# Extra arguments go to ctest (e.g. -R Engine). Not part of the README's test command: the
# instrumented build and run take ~25 min on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
jobs=$(nproc)
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_SANITIZE=ON \
      -DSTRATA_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build-asan -j "$jobs"
cd build-asan
# Leak checking is off: OpenMPI and OpenBLAS keep allocations until exit by design, and
# LeakSanitizer would report them from every MPI rank. Every other report ends the process
# with a non-zero status, so the test fails.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --output-on-failure -j "$jobs" -LE "gpu|pytorch" -E "loop.accuracy" "$@"
