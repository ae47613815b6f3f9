// The linear layer on the GPU through cuBLASLt: bf16 inputs, fp32 accumulation, bf16 or fp32
// output, with the bias and bias+GeLU epilogues fused into the matmul. Same shapes and
// argument order as kernels/cpu/gemm.h (llm.c's), plus the handle and the stream.
// Backward: dinp and dweight are cuBLASLt matmuls with beta = 1 (they ACCUMULATE like the
// CPU twin); dbias is a kernel of ours with a fixed reduction order, deliberately not
// cuBLASLt's BGRADB epilogue, which overwrites instead of accumulating and whose reduction
// order is unspecified (the executor wants bit-identical reruns). It deliberately does not
// fuse DGELU into backward (use gelu_backward on the saved pre-activation).
// Every launcher checks its arguments (KernelError) before any CUDA call, runs on `stream`
// and does not synchronise; cuBLASLt failures throw CudaError.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/common.h"
#include "kernels/cuda/cuda_resources.h"

namespace strata::kernels::cuda {

enum class GemmActivation { kNone, kGelu };

// out: (BT, OC) = act(inp: (BT, C) @ weight: (OC, C)^T + bias: (OC)); bias may be null.
// act = kGelu applies the tanh-approximation GeLU in the epilogue; pre_gelu: (BT, OC), when
// non-null, receives the value before the GeLU (what gelu_backward needs); it requires
// OC % 8 == 0 (cuBLASLt's aux-stride rule). Overwrites out.
void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int BT,
                    int C, int OC, const CublasLtHandle& lt, cudaStream_t stream,
                    GemmActivation act = GemmActivation::kNone, bf16* pre_gelu = nullptr);

// The residual block's closing layer: out: (BT, OC) = inp @ weight^T + bias + residual, the
// residual (BT, OC) added by the matmul itself (its C operand, beta = 1) instead of a separate
// pass; out may alias residual. bias may be null.
void matmul_forward_residual(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias,
                             const bf16* residual, int BT, int C, int OC,
                             const CublasLtHandle& lt, cudaStream_t stream);

// fp32 output (e.g. logits kept in fp32): out: (BT, OC) = inp @ weight^T + bias, bias: (OC)
// fp32 or null. No activation.
void matmul_forward(float* out, const bf16* inp, const bf16* weight, const float* bias,
                    int BT, int C, int OC, const CublasLtHandle& lt, cudaStream_t stream);

// ACCUMULATES (+=) into every gradient given (null: skipped):
//   dinp: (BT, C) bf16    += dout @ weight
//   dweight: (OC, C) fp32 += dout^T @ inp
//   dbias: (OC) fp32      += sum over BT of dout   (fixed order: deterministic)
// dout: (BT, OC), inp: (BT, C), weight: (OC, C), all bf16.
// overwrite_dinp = true makes dinp = dout @ weight instead (beta 0: no zeroed buffer needed;
// the training step's use, where dinp is a fresh activation gradient).
void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int BT, int C, int OC,
                     const CublasLtHandle& lt, cudaStream_t stream,
                     bool overwrite_dinp = false);

// The MLP's second linear layer backward with the GeLU backward fused into the dinp matmul's
// epilogue (cuBLASLt DGELU): dinp: (BT, C) = gelu'(pre_gelu) * (dout @ weight), OVERWRITTEN;
// pre_gelu: (BT, C), the pre-activation matmul_forward saved (its aux output); dweight and
// dbias ACCUMULATE as in matmul_backward (null: skipped). Falls back to the unfused pair
// (matmul, gelu_backward) where cuBLASLt offers no fused algorithm. C % 8 == 0.
void matmul_backward_dgelu(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                           const bf16* inp, const bf16* weight, const bf16* pre_gelu, int BT,
                           int C, int OC, const CublasLtHandle& lt, cudaStream_t stream);

}  // namespace strata::kernels::cuda
