#!/usr/bin/env bash
# Builds (in build/, with CUDA) what a GPU session runs and packs it, with Open MPI, into
# .gpu-bundle.tar.gz at the repository root: the file to name in the device tool's `carry`
# (git ignores it; ~40 MB, under the 64 MiB carry limit). tools/device/gpu_session.sh
# unpacks it on the lent machine.
# Usage: tools/device/make_bundle.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/device/targets.sh
targets=("${gpu_session_targets[@]}")
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' build/CMakeCache.txt ||
  { echo "make_bundle: build/ has no CUDA compiler; install the CUDA toolkit" >&2; exit 2; }
cmake --build build -j "$(nproc)" --target "${targets[@]}"
binaries=()
for t in "${targets[@]}"; do
  path=$(find build -name "$t" -type f -perm -u+x | head -1)
  [[ -n $path ]] || { echo "make_bundle: target $t built nothing" >&2; exit 2; }
  binaries+=("$path")
done
rm -rf .gpu .gpu-bundle.tar.gz
bash tools/device/bundle.sh --mpi .gpu "${binaries[@]}" >/dev/null
# The test binaries read configs/ and tests/ under the source directory they were compiled
# in, and select_cuda_test runs strata at its build path: gpu_session.sh rebuilds that layout
# on the GPU machine from these two paths.
printf '%s\n%s\n' "$PWD" "$PWD/build" >.gpu/built_in
strip --strip-unneeded .gpu/bin/* .gpu/lib/* 2>/dev/null || true
tar -czf .gpu-bundle.tar.gz .gpu
rm -rf .gpu
du -h .gpu-bundle.tar.gz
