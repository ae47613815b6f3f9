// The optimizer's two per-step and per-tensor decisions, in one place: the learning rate of
// each step (warmup, then constant, linear or cosine decay to min_lr; Megatron-LM's
// OptimizerParamScheduler) and which tensors weight decay applies to. The engine asks these;
// the PyTorch check (tools/check_against_pytorch.py) mirrors them.
// Deliberately not here: the AdamW arithmetic (kernels), when the step runs (the Program).
#pragma once

#include <cstdint>

#include "cost_model/specs/param_layout.h"
#include "cost_model/specs/train_spec.h"

namespace strata {

// The lr of AdamW step t (1-based) of a run of `run_steps` steps. With W = lr_warmup_steps,
// D = lr_decay_steps (0: run_steps), ratio r = (t - W) / (D - W):
//   t <= W                 lr t / W          (the first step already moves: t = 1 gives lr / W)
//   constant               lr
//   t >= D                 min_lr
//   linear                 min_lr + (lr - min_lr) (1 - r)
//   cosine                 min_lr + (lr - min_lr) (1 + cos(pi r)) / 2
// With no schedule keys this is opt.lr exactly (the same double, so runs are bit-identical).
double learning_rate(const OptimizerSpec& opt, std::int64_t t, std::int64_t run_steps);

// Whether weight decay applies to a tensor: matrices and embeddings always, vectors (biases,
// LayerNorm gains and biases) only with decay_biases_and_norms.
bool decays(const OptimizerSpec& opt, const ParamSegment& tensor);

}  // namespace strata
