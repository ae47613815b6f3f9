# shellcheck shell=bash
# Sourced on the GPU machine before running a bundle of tools/device/bundle.sh (the
# argument: the unpacked bundle's directory, absolute or relative): the bundle's libraries,
# then NCCL from the machine's Python wheel (nvidia-nccl-cu13), and the bundled Open MPI
# when there is one (mpirun on PATH, relocated by OPAL_PREFIX).
strata_bundle=$(cd "${1:-.gpu}" && pwd)
nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$strata_bundle/lib${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$strata_bundle/bin:$PATH"
if [[ -d $strata_bundle/mpi ]]; then
  export OPAL_PREFIX="$strata_bundle/mpi"
  export PMIX_INSTALL_PREFIX="$strata_bundle/mpi"
  export PATH="$strata_bundle/mpi/bin:$PATH"
  export LD_LIBRARY_PATH="$strata_bundle/mpi/lib/x86_64-linux-gnu/openmpi/lib:$LD_LIBRARY_PATH"
fi
