// The training engine of the CUDA backend on one GPU (t = p = d = 1): the CPU engine's
// contract (executor/engine/engine.h) in bf16 mixed precision. It replays the cost model's
// schedule for pipeline rank 0 (make_schedule(plan.schedule, 1, v, m)) in order, so
// GPipe, 1F1B and interleaved plans with v chunks run exactly their op sequence: with one
// pipeline rank the interleaved schedule's sends and receives go to this rank itself and
// become hand-overs of device buffers. ZeRO stages partition over d = 1 rank, so every
// stage holds the whole state (what the memory model predicts for d = 1). The loss is the
// mean over every token of the global batch, as on the CPU backend.
//
// Timing: every op is bracketed by CUDA events on the compute stream (no host sync inside
// the step); after the step's one synchronisation the events give forward_s, backward_s and
// optimizer_s and the trace, and the host clock gives step_s. The bf16 compute copy of the
// weights is what the kernels read; AdamW writes it with the fp32 master in one pass.
// Deliberately not here: several GPUs (NCCL groups), offload, printing or files.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "cost_model/model_spec.h"
#include "cost_model/plan.h"
#include "cost_model/schedule.h"
#include "cost_model/train_spec.h"
#include "executor/cuda/device_pool.h"
#include "executor/cuda/gpt_layers.h"
#include "executor/cuda/gpt_params.h"
#include "executor/data/batch.h"
#include "executor/engine/engine.h"
#include "kernels/cuda/cuda_resources.h"

namespace strata::cuda {

class CudaEngine {
 public:
  // Checks that the plan is one the CUDA backend runs (ConfigError otherwise: t = p = d = 1,
  // no offload, attention head size 64 or 128). pool, sampler must outlive the engine; the
  // pool's stream is the compute stream.
  CudaEngine(const ModelSpec& model, const TrainSpec& train, const Plan& plan, DevicePool& pool,
             const data::BatchSampler& sampler);

  // Step `step` (0-based: the data of step k, AdamW's step k + 1).
  engine::StepResult step(std::int64_t step);

  GptParams& params() { return params_; }
  const Schedule& schedule() const { return schedule_; }

  // Throws ConfigError naming the field when the CUDA backend cannot run `plan` on `model`.
  static void check_supported(const ModelSpec& model, const Plan& plan);

 private:
  struct Chunk {
    std::int64_t first_layer = 0, layers = 0;
    bool first = false, last = false;
  };
  struct Saved {  // what the forward of (micro-batch, chunk) keeps for its backward
    std::vector<DeviceBlock> inputs;  // inputs[i] = input of the chunk's layer i (+ lnf_in)
    std::vector<LayerSaved> layers;
    HeadSaved head;
  };
  struct OpTiming {
    kernels::cuda::Event start, end;
  };
  using Key = std::pair<std::int64_t, std::int64_t>;  // (micro-batch, chunk)

  void load_micro_batch(std::int64_t step, std::int64_t mb);
  void forward(std::int64_t mb, std::int64_t chunk);
  void backward(std::int64_t mb, std::int64_t chunk);
  std::string layer_unit(std::int64_t layer) const { return "layer" + std::to_string(layer); }

  ModelSpec model_;
  TrainSpec train_;
  Plan plan_;
  DevicePool* pool_;
  const data::BatchSampler* sampler_;
  cudaStream_t stream_;
  GptShape shape_;
  Schedule schedule_;
  std::vector<Chunk> chunks_;
  GptParams params_;
  GptKernels kernels_;
  DeviceBlock tokens_, targets_;  // (m, B, T) int32: the step's micro-batches
  DeviceBlock dlosses_;           // (BT): 1 / tokens of the global batch, every token
  DeviceBlock losses_;            // (m, BT): per-token losses of the step
  std::map<Key, Saved> saved_;
  std::map<Key, DeviceBlock> handed_forward_, handed_backward_;  // p = 1 "messages"
  std::vector<OpTiming> timings_;
  kernels::cuda::Event step_start_, optimizer_end_;
  double global_tokens_ = 1;
};

}  // namespace strata::cuda
