#!/usr/bin/env bash
# Builds (in build/, with CUDA) what a GPU session runs and packs it, with Open MPI, into
# .gpu-bundle.tar.gz at the repository root: the file to name in the device tool's `carry`
# (git ignores it; ~40 MB, under the 64 MiB carry limit). tools/device/gpu_session.sh
# unpacks it on the lent machine.
# Usage: tools/device/make_bundle.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=(strata cuda_kernels_test cuda_runtime_gpu_test cuda_vocab_parallel_loss_test
         cuda_engine_gpu_test cuda_engine_equivalence cuda_runtime_host_staged_mpi_test
         cuda_runtime_nccl_mpi_test select_cuda_test calibrate_cuda_gpu_test
         strata_attention_bench)
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
strip --strip-unneeded .gpu/bin/* .gpu/lib/* 2>/dev/null || true
tar -czf .gpu-bundle.tar.gz .gpu
rm -rf .gpu
du -h .gpu-bundle.tar.gz
