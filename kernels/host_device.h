// STRATA_HOST_DEVICE: a function compiled for the host and, under nvcc, for the device too, so
// the CPU and CUDA kernels share one copy of arithmetic they must agree on
// (counter_normal.h's draws, rope_frequency.h's frequencies).
#pragma once

// Inlined by force: the CPU loop over normal_estimate vectorises only when all of it is inline.
#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define STRATA_HOST_DEVICE [[gnu::always_inline]] inline
#endif
