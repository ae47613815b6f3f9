// TrainSpec loading and validation; see train_spec.h. Does not check the batch against a
// plan (Plan::check does: global_batch % (dp * micro_batch)).
#include "cost_model/train_spec.h"

#include <fmt/format.h>

#include "cost_model/errors.h"
#include "cost_model/limits.h"

namespace strata {

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp32: return "fp32";
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
  r.require_at_most("grad_clip", o.grad_clip, limits::kGradClip);
  r.require_at_most("eps", o.eps, 1.0);
  r.require_at_most("weight_decay", o.weight_decay, limits::kLearningRate);
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
  return Json{{"global_batch", global_batch},
              {"precision", to_string(precision)},
              {"optimizer", opt},
              {"seed", seed},
              {"steps", steps}};
}

}  // namespace strata
