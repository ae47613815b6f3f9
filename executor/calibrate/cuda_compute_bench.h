// Compute microbenchmarks of the CUDA backend, run through the project's own CUDA kernels as
// executor/cuda/cuda_layer_ops.cc calls them (bf16 activations, fp32 statistics, master
// weights and optimizer state): the GEMMs of a model's linear layers through cuBLASLt with
// the epilogues the layer uses (LinearShape's flags), the memory-bound kernels a layer runs
// outside its GEMMs, flash attention forward and backward, multi-tensor AdamW, and pinned
// host<->device copies. The twin of compute_bench.h (same shapes, same GEMM convention:
// forward m = BT, n = OC, k = C; backward input m = BT, n = C, k = OC; backward weight
// m = OC, n = C, k = BT), timed with CUDA events (cuda_timing.h).
// Inputs are small deterministic non-zero values (zeros run faster on tensor cores than real
// data). Every CUDA call is checked (CudaError); every buffer is an RAII owner.
// Deliberately not here: which benchmarks a calibration runs (cuda_calibration.h), the
// memory headroom (cuda_headroom.h), multi-GPU collectives.
#pragma once

#include <cstdint>

#include "executor/calibrate/compute_bench.h"
#include "executor/calibrate/timing.h"
#include "kernels/cuda/cuda_resources.h"

namespace strata::calibrate {

class CudaComputeBench {
 public:
  // On the current device: creates a stream and a cuBLASLt handle with the executor's
  // workspace (CublasLtHandle's default). CudaError when that fails.
  CudaComputeBench();

  // One pass of a linear layer as the CUDA layer runs it: forward through matmul_forward with
  // the bias (and GeLU) epilogue, or matmul_forward_residual; backward input through
  // matmul_backward (dinp overwritten, as the training step does) or matmul_backward_dgelu;
  // backward weight through matmul_backward's dweight (and dbias when the layer has a bias:
  // the CUDA backend has no separate bias pass to price it elsewhere). The logits' rows are
  // padded as vocab_rows says, and the measurement keeps the unpadded (m, n, k): the time
  // model prices V / tp rows, and this is their real time.
  GemmMeasurement measure_linear(const LinearShape& layer, GemmPass pass,
                                 const TimingOptions& timing);

  // Seconds of one layer's forward memory-bound kernels at tp 1 on BT tokens, as
  // gpt_layer.cc runs them on CUDA: LayerNorm 1, and the fused residual add + LayerNorm 2
  // (GeLU, the biases and fc2's residual are GEMM epilogues, timed with the GEMMs).
  double layer_elementwise_s(std::int64_t BT, std::int64_t C, const TimingOptions& timing);
  // ... and of its backward: the two LayerNorm backwards (GeLU's derivative is fc2's
  // input-gradient epilogue, the bias gradients are in the backward-weight GEMMs).
  double layer_elementwise_backward_s(std::int64_t BT, std::int64_t C,
                                      const TimingOptions& timing);

  // Seconds of one flash attention forward / backward on qkv (B, T, 3C) with NH heads
  // (head size 64 or 128: the kernel's; KernelError otherwise).
  double attention_s(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t NH,
                     const TimingOptions& timing);
  double attention_backward_s(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t NH,
                              const TimingOptions& timing);

  // Parameters per second of adamw_update over one tensor of n parameters (fp32 master,
  // gradient and moments; the bf16 compute copy written, as in training).
  double adamw_params_per_s(std::int64_t n, const TimingOptions& timing);

  // Bytes per second of cudaMemcpyAsync between `bytes` of pinned host memory and the device.
  double host_to_device_bytes_per_s(std::int64_t bytes, const TimingOptions& timing);
  double device_to_host_bytes_per_s(std::int64_t bytes, const TimingOptions& timing);

  const kernels::cuda::CublasLtHandle& cublas_lt() const { return lt_; }
  cudaStream_t stream() const { return stream_.get(); }

 private:
  double copy_bytes_per_s(std::int64_t bytes, bool to_device, const TimingOptions& timing);
  kernels::cuda::Stream stream_;
  kernels::cuda::CublasLtHandle lt_;
};

}  // namespace strata::calibrate
