// Small elementwise helpers over flat fp32 arrays (N elements): the residual add and the
// buffer bookkeeping (accumulate, scale, zero, copy) the model and the optimizer need.
// OpenMP-parallel above kParallelMinElements (parallel.h); each element independent, so
// deterministic. Fused only where a layer op would otherwise open a region per step of it.
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

// out: (N) = a + b. out may alias a or b. (Its backward is accumulate() into both inputs.)
void residual_forward(float* out, const float* a, const float* b, std::int64_t N);

// dst: (N) += src: (N).
void accumulate(float* dst, const float* src, std::int64_t N);

// x: (N) *= s.
void scale(float* x, std::int64_t N, float s);

// x: (N) = 0.
void zero(float* x, std::int64_t N);

// dst: (N) = src: (N); must not overlap.
void copy(float* dst, const float* src, std::int64_t N);

// out: (rows, cols) += bias: (cols) broadcast over rows (a row-parallel linear's bias, added
// once after its TP sum).
void add_bias(float* out, const float* bias, int rows, int cols);

// out: (rows, cols) = (y + bias) + residual, bias: (cols) broadcast (null: none); the same
// bits as copy, add_bias and residual_forward in turn. out may alias y or residual.
void bias_residual_forward(float* out, const float* y, const float* bias, const float* residual,
                           int rows, int cols);

}  // namespace strata::kernels::cpu
