#!/usr/bin/env bash
# Packs binaries built on this machine for a run on a lent GPU machine (same x86-64, same
# CUDA 13, newer glibc, no MPI): copies the given binaries into DEST/bin and every shared
# library they need that such a machine lacks (MPI, fmt, OpenBLAS, liburing, ...) into
# DEST/lib; with --mpi also Open MPI itself (mpirun, its plugins and help files under
# DEST/mpi, relocated by OPAL_PREFIX in tools/device/env.sh), since multi-rank runs and the
# equivalence matrix start under mpirun.
# The C runtime, libstdc++ and the CUDA libraries are left out: the GPU machine has its own
# (NCCL comes from its Python wheel: see tools/device/env.sh).
# Usage: tools/device/bundle.sh [--mpi] DEST BINARY...
# Deliberately not here: building (the caller builds), running anything.
set -euo pipefail
with_mpi=0
if [[ ${1:-} == --mpi ]]; then with_mpi=1; shift; fi
dest=$1; shift
mkdir -p "$dest/bin" "$dest/lib"
skip='^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libz|ld-linux-x86-64|libcuda|libcudart|libcublas|libcublasLt|libnccl|linux-vdso)\.'
copy_libs_of() {  # every non-system shared library a binary or plugin needs, into DEST/lib
  ldd "$1" 2>/dev/null | awk '/=>/ {print $1, $3}' | while read -r name path; do
    if [[ ! $name =~ $skip ]] && [[ -f $path ]]; then cp -fL "$path" "$dest/lib/"; fi
  done
}
for bin in "$@"; do
  cp -f "$bin" "$dest/bin/"
  strip --strip-debug "$dest/bin/$(basename "$bin")" 2>/dev/null || true
  copy_libs_of "$bin"
done
if ((with_mpi)); then
  # Open MPI's paths are its prefix (/usr) plus fixed suffixes; under OPAL_PREFIX=DEST/mpi
  # it looks for the same suffixes there. PMIx, Open MPI 4's external runtime, relocates
  # by PMIX_INSTALL_PREFIX the same way.
  ompi=/usr/lib/x86_64-linux-gnu/openmpi
  pmix=/usr/lib/x86_64-linux-gnu/pmix2
  mkdir -p "$dest/mpi/bin" "$dest/mpi/lib/x86_64-linux-gnu" "$dest/mpi/share"
  cp -f "$(readlink -f "$(command -v mpirun)")" "$dest/mpi/bin/mpirun"
  # A process that calls MPI_Init outside mpirun (a one-rank run, a gtest binary) starts
  # orted as its singleton's runtime.
  cp -f "$(readlink -f "$(command -v orted)")" "$dest/mpi/bin/orted"
  cp -rL "$ompi" "$dest/mpi/lib/x86_64-linux-gnu/"
  [[ -d $pmix ]] && cp -rL "$pmix" "$dest/mpi/lib/x86_64-linux-gnu/"
  cp -rL /usr/share/openmpi "$dest/mpi/share/"
  [[ -d /usr/share/pmix ]] && cp -rL /usr/share/pmix "$dest/mpi/share/"
  rm -rf "$dest/mpi/lib/x86_64-linux-gnu/openmpi/include"
  copy_libs_of "$dest/mpi/bin/mpirun"
  copy_libs_of "$dest/mpi/bin/orted"
  while IFS= read -r -d '' plugin; do copy_libs_of "$plugin"; done \
    < <(find "$dest/mpi" -name '*.so' -print0)
fi
du -sh "$dest"
