// The GPT model's state on one GPU in bf16 mixed precision (Micikevicius et al. 2018 with bf16,
// so no loss scaling): fp32 master weights, their bf16 compute copy, fp32 gradients and fp32
// AdamW moments, each one flat device buffer over every parameter unit of the single-rank
// model (engine::rank_layouts at t = p = d = 1: the embedding, the layers, the final
// LayerNorm; wte is tied, so the head reads the embedding's). Units start at multiples of
// kUnitAlignment elements (256 bytes of bf16, the alignment cuBLASLt's fastest kernels
// assume), so every tensor a matmul reads is at least 16-byte aligned.
// Initial values are model::init_unit_range's, the same counter-based values every CPU plan
// starts from, so the two backends train the same model from the same point.
// The optimizer step is one multi-tensor AdamW launch over the flat buffers (the padding
// between units has zero parameters and zero gradients and stays zero), after an optional
// global-norm clip whose sum of squares is the deterministic device reduction.
// Deliberately not here: ZeRO partitions and offload (one GPU holds everything), the math of
// the layers (gpt_layers.h), and the schedule (cuda_engine.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cost_model/train_spec.h"
#include "executor/cuda/device_pool.h"
#include "executor/model/gpt_layer.h"
#include "cost_model/param_layout.h"
#include "kernels/cuda/common.h"

namespace strata::cuda {

using kernels::cuda::bf16;

class GptParams {
 public:
  static constexpr std::int64_t kUnitAlignment = 128;  // elements (256 bytes of bf16)

  // Allocates the five buffers through `pool` (tags "params", "gradients", "optimizer") and
  // initialises the master weights from `seed`, then their bf16 copy. Synchronous.
  GptParams(std::vector<UnitLayout> units, std::uint64_t seed, DevicePool& pool,
            cudaStream_t stream);

  bool has(const std::string& unit) const { return offsets_.count(unit) != 0; }
  const UnitLayout& layout(const std::string& unit) const;
  // The unit's first element in the flat buffers.
  std::int64_t offset(const std::string& unit) const;
  std::int64_t total() const { return total_; }  // elements, padding included

  const bf16* weights(const std::string& unit) const { return params16_.as<bf16>() + offset(unit); }
  float* grads(const std::string& unit) const { return grads_.as<float>() + offset(unit); }
  // A named tensor (segment) of a unit.
  const bf16* weight(const std::string& unit, const std::string& segment) const;
  float* grad(const std::string& unit, const std::string& segment) const;
  model::LayerTensors<const bf16*> layer_weights(const std::string& unit) const;
  model::LayerTensors<float*> layer_grads(const std::string& unit) const;

  void zero_grads(cudaStream_t stream) const;  // before a step's first backward

  // Global-norm clipping (grad_clip > 0) and AdamW (step is 1-based); returns the gradient
  // norm before clipping. Synchronises once (the norm decides the clip scale on the host).
  double clip_and_update(const OptimizerSpec& opt, int step, cudaStream_t stream);

  // The fp32 master weights of a unit, copied to the host (tests, checkpoints). Synchronous.
  std::vector<float> master(const std::string& unit, cudaStream_t stream) const;

 private:
  std::vector<UnitLayout> units_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::int64_t> offsets_;
  std::int64_t total_ = 0;
  DeviceBlock master_, params16_, grads_, m_, v_;
  DeviceBlock norm_, norm_scratch_;  // one double; the reduction's partials
};

}  // namespace strata::cuda
