// See stage_balance.h.
#include "planner/stage_balance.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include <fmt/format.h>

#include "cost_model/specs/partition.h"

namespace strata {
namespace {

// The estimated busy time of each rank if the first virtual stage held `first` layers, the
// last `last` and each other `shared` (a rank holds v virtual stages).
double busiest_rank_s(const Plan& plan, double layer_s, double first_extra_s, double last_extra_s,
                      std::int64_t first, std::int64_t last, std::int64_t shared) {
  const auto v = static_cast<double>(plan.virtual_stages);
  const double middle = v * static_cast<double>(shared) * layer_s;
  const double first_rank =
      (static_cast<double>(first) + (v - 1) * static_cast<double>(shared)) * layer_s + first_extra_s;
  const double last_rank =
      (static_cast<double>(last) + (v - 1) * static_cast<double>(shared)) * layer_s + last_extra_s;
  double most = std::max(first_rank, last_rank);
  if (plan.pp > 2) most = std::max(most, middle);
  return most;
}

}  // namespace

std::vector<Plan> balanced_splits(const ModelSpec& model, const Plan& even,
                                  const std::vector<double>& stage_busy_s, std::size_t count) {
  const std::int64_t p = even.pp;
  const std::int64_t v = even.virtual_stages;
  if (p < 2 || even.uneven_stages() || static_cast<std::int64_t>(stage_busy_s.size()) != p ||
      !pipeline_violation(model, p, v).empty()) {
    return {};
  }
  const std::int64_t layers_per_rank = model.layers / p;
  double layer_s = 0;
  if (p > 2) {
    // The middle ranks only run layers; their median resists one odd rank.
    std::vector<double> middle(stage_busy_s.begin() + 1, stage_busy_s.end() - 1);
    std::nth_element(middle.begin(), middle.begin() + static_cast<std::ptrdiff_t>(middle.size() / 2),
                     middle.end());
    layer_s = middle[middle.size() / 2] / static_cast<double>(layers_per_rank);
  } else {
    layer_s = stage_busy_s.front() / static_cast<double>(layers_per_rank);
  }
  if (!(layer_s > 0)) return {};
  const double layers_s = static_cast<double>(layers_per_rank) * layer_s;
  const double first_extra_s = std::max(stage_busy_s.front() - layers_s, 0.0);
  const double last_extra_s = std::max(stage_busy_s.back() - layers_s, 0.0);

  const std::int64_t share = model.layers / (p * v);
  struct Scored {
    double busiest_s;
    Plan plan;
  };
  // Only splits estimated to balance better than the even one (which is first = last = share).
  const double even_busiest_s =
      busiest_rank_s(even, layer_s, first_extra_s, last_extra_s, share, share, share);
  std::vector<Scored> scored;
  // Every split whose shorter or longer end stays within twice an even share: beyond that a
  // stage's extra work would have to exceed the whole of an even stage's layers.
  for (std::int64_t first = 1; first <= 2 * share; ++first) {
    for (std::int64_t last = 1; last <= 2 * share; ++last) {
      Plan uneven = even;
      uneven.first_stage_layers = first;
      uneven.last_stage_layers = last;
      if (!pipeline_violation(model, uneven).empty()) continue;
      // Virtual stage 1 (rank 1's first chunk) is a shared one when there are more than two.
      const std::int64_t shared = p * v > 2 ? chunk_layers(model, uneven, 1, 0).layers : 0;
      const double busiest_s =
          busiest_rank_s(uneven, layer_s, first_extra_s, last_extra_s, first, last, shared);
      if (busiest_s < even_busiest_s) scored.push_back({busiest_s, uneven});
    }
  }
  std::stable_sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    return a.busiest_s < b.busiest_s;
  });
  std::vector<Plan> out;
  for (std::size_t i = 0; i < scored.size() && out.size() < count; ++i) out.push_back(scored[i].plan);
  return out;
}

std::string split_description(const ModelSpec& model, const Plan& plan) {
  const ChunkLayers first = chunk_layers(model, plan, 0, 0);
  const ChunkLayers last = chunk_layers(model, plan, plan.pp - 1, plan.virtual_stages - 1);
  const char* stage = plan.virtual_stages > 1 ? "virtual stage" : "stage";
  std::string text = fmt::format("first {} {} layers, last {}", stage, first.layers, last.layers);
  if (plan.pp * plan.virtual_stages > 2) {
    text += fmt::format(" (the others {})", chunk_layers(model, plan, 1, 0).layers);
  }
  return text;
}

}  // namespace strata
