// LR schedule and weight-decay rule (see optimizer_schedule.h).
#include "cost_model/specs/optimizer_schedule.h"

#include <cmath>
#include <numbers>

namespace strata {

double learning_rate(const OptimizerSpec& opt, std::int64_t t, std::int64_t run_steps) {
  const std::int64_t warmup = opt.lr_warmup_steps;
  if (warmup > 0 && t <= warmup) {
    return opt.lr * static_cast<double>(t) / static_cast<double>(warmup);
  }
  if (opt.lr_decay_style == OptimizerSpec::DecayStyle::kConstant) return opt.lr;
  const std::int64_t end = opt.lr_decay_steps > 0 ? opt.lr_decay_steps : run_steps;
  if (t >= end || end <= warmup) return opt.min_lr;
  const double ratio = static_cast<double>(t - warmup) / static_cast<double>(end - warmup);
  const double coeff = opt.lr_decay_style == OptimizerSpec::DecayStyle::kLinear
                           ? 1.0 - ratio
                           : 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return opt.min_lr + (opt.lr - opt.min_lr) * coeff;
}

bool decays(const OptimizerSpec& opt, const ParamSegment& tensor) {
  return tensor.cols > 1 || opt.decay_biases_and_norms;
}

}  // namespace strata
