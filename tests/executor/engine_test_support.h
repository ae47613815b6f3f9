// Shared by the executor model/engine tests: the bundled tiny specs, a plan builder, and a
// loop running N training steps of a plan on a world communicator. Header-only on purpose
// (each test binary includes it once).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/data/corpus.h"
#include "executor/run/rank_training.h"

namespace strata::testing_support {

inline ModelSpec tiny_model() {
  return ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/tiny.json");
}
// The Llama family's tiny model: RMSNorm, SwiGLU, RoPE, 2 KV heads of 4, untied output, no
// biases (configs/models/tiny-llama.json).
inline ModelSpec tiny_llama_model() {
  return ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/tiny-llama.json");
}
inline TrainSpec tiny_train() {
  return TrainSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/train/tiny.json");
}

inline Plan make_plan(std::int64_t t, std::int64_t p, std::int64_t d, std::int64_t v,
                      ScheduleKind schedule, int zero, std::int64_t micro_batch) {
  Plan plan;
  plan.tp = t;
  plan.pp = p;
  plan.dp = d;
  plan.virtual_stages = v;
  plan.schedule = schedule;
  plan.zero_stage = zero;
  plan.micro_batch = micro_batch;
  return plan;
}

// Losses of `steps` steps (collective over world).
inline std::vector<double> run_losses(const ModelSpec& model, const TrainSpec& train,
                                      const Plan& plan, MpiCommunicator& world, int steps,
                                      const std::vector<std::uint8_t>& corpus) {
  plan.check_against_model(model, train, "test plan");
  engine::RankTraining rank(model, train, plan, world, TierBudgets{}, corpus);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(rank.engine().step(s).loss);
  return losses;
}

// Each step's loss and gradient norm.
struct StepValues {
  std::vector<double> losses, grad_norms;
};
// init: the initial values (empty: drawn from train.seed).
inline StepValues run_steps(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                            MpiCommunicator& world, int steps,
                            const std::vector<std::uint8_t>& corpus,
                            const engine::BackendMaker& backend = engine::cpu_backend_maker(),
                            const model::UnitInit& init = {}) {
  plan.check_against_model(model, train, "test plan");
  engine::RankTraining rank(model, train, plan, world, TierBudgets{},
                            data::TokenView::of_bytes(corpus), {}, backend, init);
  StepValues values;
  for (int s = 0; s < steps; ++s) {
    const auto r = rank.engine().step(s);
    values.losses.push_back(r.loss);
    values.grad_norms.push_back(r.grad_norm);
  }
  return values;
}

}  // namespace strata::testing_support
