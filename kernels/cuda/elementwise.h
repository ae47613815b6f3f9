// Small elementwise kernels over flat arrays (N elements) for the mixed-precision model:
// the residual add on bf16 activations, gradient accumulation, and the bf16 <-> fp32 casts
// (master weights to compute copies, bf16 grads to fp32). Each element independent, so
// deterministic. Deliberately nothing fused (the LayerNorm kernel fuses its own residual).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/common.h"

namespace strata::kernels::cuda {

// out: (N) = bf16(a + b), sum in fp32. out may alias a or b.
void residual_forward(bf16* out, const bf16* a, const bf16* b, std::int64_t N,
                      cudaStream_t stream);

// dst: (N) += src: (N) (fp32 += bf16, e.g. a bf16 gradient into an fp32 accumulator).
void accumulate(float* dst, const bf16* src, std::int64_t N, cudaStream_t stream);

// dst: (N) = bf16(src), round to nearest even. dst must not overlap src.
void cast_to_bf16(bf16* dst, const float* src, std::int64_t N, cudaStream_t stream);

// dst: (N) = float(src) (exact). dst must not overlap src.
void cast_to_f32(float* dst, const bf16* src, std::int64_t N, cudaStream_t stream);

}  // namespace strata::kernels::cuda
