#!/usr/bin/env bash
# Packs binaries built on this machine for a run on a lent GPU machine (same x86-64, same
# CUDA 13, newer glibc): copies the given binaries into DEST/bin and every shared library
# they need that such a machine lacks (MPI, fmt, OpenBLAS, liburing, ...) into DEST/lib.
# The C runtime, libstdc++ and the CUDA libraries are left out: the GPU machine has its own
# (NCCL comes from its Python wheel: see tools/device/env.sh).
# Usage: tools/device/bundle.sh DEST BINARY...
# Deliberately not here: building (the caller builds), running anything.
set -euo pipefail
dest=$1; shift
mkdir -p "$dest/bin" "$dest/lib"
skip='^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libz|ld-linux-x86-64|libcuda|libcudart|libcublas|libcublasLt|libnccl|linux-vdso)\.'
for bin in "$@"; do
  cp -f "$bin" "$dest/bin/"
  strip --strip-debug "$dest/bin/$(basename "$bin")" 2>/dev/null || true
  ldd "$bin" | awk '/=>/ {print $1, $3}' | while read -r name path; do
    if [[ ! $name =~ $skip ]] && [[ -f $path ]]; then cp -fL "$path" "$dest/lib/"; fi
  done
done
du -sh "$dest"
