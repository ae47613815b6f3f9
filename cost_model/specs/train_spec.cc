// TrainSpec loading and validation; see train_spec.h. Does not check the batch against a
// plan (Plan::check does: global_batch % (dp * micro_batch)).
#include "cost_model/specs/train_spec.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/limits.h"

namespace strata {

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp32: return "fp32";
  }
  return "unknown";
}

std::string to_string(OptimizerSpec::DecayStyle style) {
  switch (style) {
    case OptimizerSpec::DecayStyle::kConstant: return "constant";
    case OptimizerSpec::DecayStyle::kLinear: return "linear";
    case OptimizerSpec::DecayStyle::kCosine: return "cosine";
  }
  return "unknown";
}

namespace {

OptimizerSpec optimizer_from_json(JsonObjectReader r) {
  OptimizerSpec o;
  o.name = r.get_enum("name", {"adamw"});
  o.lr = r.get_number("lr");
  o.beta1 = r.get_number("beta1");
  o.beta2 = r.get_number("beta2");
  o.eps = r.get_number("eps");
  o.weight_decay = r.get_number("weight_decay");
  // Clipping is off unless asked for; the key is optional because most runs leave it off.
  o.grad_clip = r.get_number_or("grad_clip", 0.0);
  r.require_positive("lr", o.lr);
  r.require_at_most("lr", o.lr, limits::kLearningRate);
  if (!(o.beta1 >= 0 && o.beta1 < 1)) r.fail("beta1", fmt::format("{}", o.beta1), "a value in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) r.fail("beta2", fmt::format("{}", o.beta2), "a value in [0, 1)");
  r.require_positive("eps", o.eps);
  r.require_non_negative("weight_decay", o.weight_decay);
  r.require_non_negative("grad_clip", o.grad_clip);
  // The schedule: optional keys, absent = today's constant lr (bit-identical runs).
  o.lr_warmup_steps = r.get_int_or("lr_warmup_steps", 0);
  r.require_non_negative("lr_warmup_steps", static_cast<double>(o.lr_warmup_steps));
  const std::string style = r.get_enum_or("lr_decay_style", {"constant", "linear", "cosine"}, "constant");
  o.lr_decay_style = style == "linear"   ? OptimizerSpec::DecayStyle::kLinear
                     : style == "cosine" ? OptimizerSpec::DecayStyle::kCosine
                                         : OptimizerSpec::DecayStyle::kConstant;
  o.lr_decay_steps = r.get_int_or("lr_decay_steps", 0);
  r.require_non_negative("lr_decay_steps", static_cast<double>(o.lr_decay_steps));
  o.min_lr = r.get_number_or("min_lr", 0.0);
  if (!(o.min_lr >= 0 && o.min_lr <= o.lr)) {
    r.fail("min_lr", fmt::format("{}", o.min_lr), fmt::format("a value in [0, lr = {}]", o.lr));
  }
  if (o.lr_decay_steps > 0 && o.lr_decay_style != OptimizerSpec::DecayStyle::kConstant &&
      o.lr_decay_steps <= o.lr_warmup_steps) {
    r.fail("lr_decay_steps", std::to_string(o.lr_decay_steps),
           fmt::format("more than lr_warmup_steps = {} (the decay runs between them)",
                       o.lr_warmup_steps));
  }
  o.decay_biases_and_norms = r.get_bool_or("decay_biases_and_norms", false);
  r.require_at_most("grad_clip", o.grad_clip, limits::kGradClip);
  r.require_at_most("eps", o.eps, 1.0);
  r.require_at_most("weight_decay", o.weight_decay, limits::kLearningRate);
  r.require_at_most("lr_warmup_steps", static_cast<double>(o.lr_warmup_steps), limits::kSteps);
  r.require_at_most("lr_decay_steps", static_cast<double>(o.lr_decay_steps), limits::kSteps);
  r.finish();
  return o;
}

}  // namespace

TrainSpec TrainSpec::from_json(const Json& json, const std::string& source) {
  JsonObjectReader r(json, source);
  TrainSpec t;
  t.global_batch = r.get_int("global_batch");
  r.require_positive("global_batch", static_cast<double>(t.global_batch));
  r.require_at_most("global_batch", static_cast<double>(t.global_batch), limits::kGlobalBatch);
  t.precision = r.get_enum("precision", {"bf16", "fp32"}) == "bf16" ? Precision::kBf16
                                                                    : Precision::kFp32;
  t.optimizer = optimizer_from_json(r.get_object("optimizer"));
  const std::int64_t seed = r.get_int("seed");
  r.require_non_negative("seed", static_cast<double>(seed));
  t.seed = static_cast<std::uint64_t>(seed);
  t.steps = r.get_int("steps");
  r.require_positive("steps", static_cast<double>(t.steps));
  r.require_at_most("steps", static_cast<double>(t.steps), limits::kSteps);
  r.finish();
  return t;
}

TrainSpec TrainSpec::load(const std::string& path) { return from_json(read_json_file(path), path); }

Json TrainSpec::to_json() const {
  Json opt{{"name", optimizer.name},   {"lr", optimizer.lr},
           {"beta1", optimizer.beta1}, {"beta2", optimizer.beta2},
           {"eps", optimizer.eps},     {"weight_decay", optimizer.weight_decay},
           {"grad_clip", optimizer.grad_clip}};
  // The optional keys only when set, so a spec without them round-trips unchanged.
  const OptimizerSpec defaults;
  if (optimizer.lr_warmup_steps != defaults.lr_warmup_steps) {
    opt["lr_warmup_steps"] = optimizer.lr_warmup_steps;
  }
  if (optimizer.lr_decay_style != defaults.lr_decay_style) {
    opt["lr_decay_style"] = to_string(optimizer.lr_decay_style);
  }
  if (optimizer.lr_decay_steps != defaults.lr_decay_steps) opt["lr_decay_steps"] = optimizer.lr_decay_steps;
  if (optimizer.min_lr != defaults.min_lr) opt["min_lr"] = optimizer.min_lr;
  if (optimizer.decay_biases_and_norms != defaults.decay_biases_and_norms) {
    opt["decay_biases_and_norms"] = optimizer.decay_biases_and_norms;
  }
  return Json{{"global_batch", global_batch},
              {"precision", to_string(precision)},
              {"optimizer", opt},
              {"seed", seed},
              {"steps", steps}};
}

}  // namespace strata
