# Sourced on the lent GPU machine before running a bundle of tools/device/bundle.sh:
# the bundle's libraries, then NCCL from the machine's Python wheel (nvidia-nccl-cu13), and
# the bundled Open MPI when there is one (mpirun on PATH, relocated by OPAL_PREFIX).
bundle=${1:-.gpu}
nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$PWD/$bundle/lib${nccl_dir:+:$nccl_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$PWD/$bundle/bin:$PATH"
if [[ -d $PWD/$bundle/mpi ]]; then
  export OPAL_PREFIX="$PWD/$bundle/mpi"
  export PMIX_INSTALL_PREFIX="$PWD/$bundle/mpi"
  export PATH="$PWD/$bundle/mpi/bin:$PATH"
  export LD_LIBRARY_PATH="$PWD/$bundle/mpi/lib/x86_64-linux-gnu/openmpi/lib:$LD_LIBRARY_PATH"
fi
