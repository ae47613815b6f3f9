// rank_ordered_sum: out[i] = ((copies[0*m+i] + copies[1*m+i]) + copies[2*m+i]) + ... over
// `ranks` rows, the fixed order that makes NcclCommunicator's sums bit-identical across ranks,
// reruns and to MpiCommunicator's. copies: (ranks, m) rank-major on the device; out: (m), may
// not alias copies. bf16 rows are added in an fp32 accumulator and rounded to bf16 once (round
// to nearest even, the same bits as kernels/bf16.h's float_to_bf16), as communicator.h's
// contract says. Enqueued on `stream`; the launch is checked (CudaError), faults surface at
// the next sync.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/dtype.h"

namespace strata::cuda {

void rank_ordered_sum(const float* copies, float* out, std::int64_t m, int ranks,
                      cudaStream_t stream);
void rank_ordered_sum(const double* copies, double* out, std::int64_t m, int ranks,
                      cudaStream_t stream);
void rank_ordered_sum(const Bf16Bits* copies, Bf16Bits* out, std::int64_t m, int ranks,
                      cudaStream_t stream);

}  // namespace strata::cuda
