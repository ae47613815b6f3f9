# shellcheck shell=bash
# Sourced: the binaries a GPU session runs, in one place for tools/device/make_bundle.sh
# (which builds and packs them) and tools/device/gpu_session.sh (which runs them from the
# bundle or from a build tree).
# Deliberately not here: which phase runs which binary (gpu_phases.sh).
# shellcheck disable=SC2034  # read by the scripts that source this file
gpu_session_targets=(
  strata
  # the GPU unit tests (ctest label gpu), one process each
  cuda_kernels_test cuda_runtime_gpu_test cuda_vocab_parallel_loss_test cuda_engine_gpu_test
  select_cuda_test calibrate_cuda_gpu_test cuda_seeded_init_test
  # the GPU unit tests under mpirun, and the CUDA equivalence matrix
  cuda_runtime_host_staged_mpi_test cuda_runtime_nccl_mpi_test cuda_engine_equivalence
)
