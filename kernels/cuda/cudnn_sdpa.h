// Causal attention through cuDNN's fused scaled-dot-product attention (flash attention in
// cuDNN's runtime-fusion engines), on strata's packed layout (attention.h): qkv (B, T,
// (NH + 2 KVH) HS) rows [q | k | v], out and dout (B, T, NH HS), lse (B, NH, T) the natural-log
// sum of exponentials of the scaled scores (cuDNN's "Stats", the same quantity the hand-written
// kernels save, so either backward reads either forward's). GQA: KV head h / (NH / KVH).
// The graphs are cuDNN's backend operation graphs of the SDPA pattern its documentation and
// frontend describe: Q K^T, the scale, the causal mask (row index >= column index, else -inf),
// the softmax with its statistics, P V; the backward's dP, dS and the three products, with dQ
// written directly (the deterministic form on Hopper) and, under GQA, dK and dV summed over
// each KV head's query heads by a reduction. Plans are built once per shape and direction, the
// backward's among engines without cuDNN's NONDETERMINISTIC note only (strata's reruns are
// bit-identical).
// Every failure (no engine takes the graph, a cuDNN error) throws CudaError with cuDNN's words;
// the launcher (attention_launcher.h) falls back to the hand-written kernels on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include <cuda_runtime.h>

#include "kernels/cuda/common.h"
#include "kernels/cuda/cuda_resources.h"

namespace strata::kernels::cuda {

struct CudnnLibrary;

struct SdpaShape {
  int B = 0, T = 0, NH = 0, KVH = 0, HS = 0;
  auto key() const { return std::tuple(B, T, NH, KVH, HS); }
};

class CudnnSdpa {
 public:
  // Throws CudaError when cuDNN cannot make a handle (no GPU, a driver too old for it).
  explicit CudnnSdpa(const CudnnLibrary& lib);
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  // out, lse from qkv (attention_forward's contract), on `stream`.
  void forward(bf16* out, float* lse, const bf16* qkv, const SdpaShape& s, cudaStream_t stream);
  // dqkv OVERWRITTEN with the gradient (attention_backward's, overwrite = true).
  void backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                const SdpaShape& s, cudaStream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::kernels::cuda
