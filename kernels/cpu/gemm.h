// Matrix multiply on the CPU through cblas_sgemm (OpenBLAS): the linear layer
// (matmul_forward / matmul_backward, llm.c's shapes) and a thin general row-major sgemm.
// It deliberately does no blocking or threading of its own: OpenBLAS does both; with many
// MPI ranks sharing few cores call set_blas_threads(1) once per process.
// All tensors are fp32, row-major, raw pointers with their shapes in comments.
#pragma once

namespace strata::kernels::cpu {

// out: (BT, OC) = inp: (BT, C) @ weight: (OC, C)^T + bias: (OC) (bias may be null).
// Overwrites out. Throws KernelError on null tensors or non-positive sizes.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int BT, int C, int OC);

// What matmul_backward does with dinp: a layer's input gradient is usually new memory
// (kOverwrite spares the caller a memset and sgemm a read of it); kAccumulate adds to it.
enum class InputGrad { kAccumulate, kOverwrite };

// Backward of matmul_forward; ACCUMULATES (+=) into every gradient given, dinp only when
// dinp_mode is kAccumulate (kOverwrite: dinp = dout @ weight, its contents never read):
//   dinp: (BT, C)    += dout @ weight        (null: skipped)
//   dweight: (OC, C) += dout^T @ inp         (null: skipped)
//   dbias: (OC)      += sum over BT of dout  (null: skipped)
// dout: (BT, OC), inp: (BT, C), weight: (OC, C). The dbias reduction runs in a fixed order
// (deterministic for any thread count).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int BT, int C, int OC,
                     InputGrad dinp_mode = InputGrad::kAccumulate);

enum class Trans { kNo, kYes };

// General row-major sgemm: c: (M, N) = alpha * op(a) @ op(b) + beta * c, where
// op(a): (M, K) and op(b): (K, N); lda/ldb/ldc are the row strides of a, b, c as stored.
void sgemm(Trans trans_a, Trans trans_b, int M, int N, int K, float alpha, const float* a,
           int lda, const float* b, int ldb, float beta, float* c, int ldc);

// Sets OpenBLAS's thread count for this process (openblas_set_num_threads). Throws
// KernelError when n < 1.
void set_blas_threads(int n);

}  // namespace strata::kernels::cpu
