// A unit's seeded initial values drawn on the GPU: model::init_unit_range's bits, without the
// host drawing them (minutes for a large model's host threads) or copying them up. The
// kernel (kernels/cuda/normal_init.h) decides all but about 1 in 1,000 elements; the host
// fills those with the exact formula (kernels/cpu/normal_init.h) and scatters them in.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cost_model/specs/param_layout.h"

namespace strata::cuda {

// dst (device, fp32): elements [begin, end) of `unit`'s flat buffer as
// model::init_unit_range(unit, seed, ...) writes them (padding past unit.count zero), on
// `stream`; returns when they are in place. Throws kernels::CudaError (through CUDA_CHECK).
void draw_seeded_on_device(float* dst, const UnitLayout& unit, std::uint64_t seed,
                           std::int64_t begin, std::int64_t end, cudaStream_t stream);

}  // namespace strata::cuda
