// StepReport (Prediction = RunReport) reading and writing, and Megatron's model-FLOPs
// formula; see step_report.h. Keys are the field names, already in SI (_s, _bytes) except
// tflops_per_gpu, whose name carries its unit. Does not compute any figure of a report:
// the cost model fills a Prediction, the executor a RunReport.
#include "cost_model/specs/step_report.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/layer_tensors.h"
#include "cost_model/specs/model_spec.h"

namespace strata {

TierBytes MemoryByKind::total() const {
  TierBytes t;
  for (const TierBytes& b : bytes) {
    t.device += b.device;
    t.host += b.host;
    t.nvme += b.nvme;
  }
  return t;
}

MemoryKind MemoryByKind::largest_on_device() const {
  MemoryKind largest = kMemoryKinds.front();
  for (const MemoryKind k : kMemoryKinds) {
    if ((*this)[k].device > (*this)[largest].device) largest = k;
  }
  return largest;
}

const RankMemory* worst_device_rank(const std::vector<RankMemory>& ranks) {
  const RankMemory* worst = nullptr;
  for (const RankMemory& r : ranks) {
    if (worst == nullptr || r.peak_bytes.device > worst->peak_bytes.device) worst = &r;
  }
  return worst;
}

double StepTimeParts::sum() const {
  return forward_s + backward_s + recompute_s + tp_comm_s + pp_comm_s + dp_comm_s + offload_s +
         optimizer_s + bubble_s + other_s;
}

// Training FLOPs, counted the published way (Kaplan et al. 2020; Narayanan et al. 2021, eq.
// (3); PaLM's MFU, Chowdhery et al. 2022, appendix B): a layer's forward is 2N + 4 s h a token
// (N its GEMM weights, layer_tensors.h: layer_matmul_params; the attention scores and values
// as full s x s products of width h = heads x head_dim), its backward twice that; the logits'
// forward 2 V h, backward twice that; an untied output layer costs what the tied one does.
// N = k h^2 with k = 12 for GPT-2 (4h^2 + 2hf at f = 4h), 2 + 2 kv d / h + 3 f / h for Llama
// (SwiGLU's three matrices, GQA's narrower K and V). Written in Megatron's factored form
// with 12 replaced by k, so that for GPT the doubles are the closed forms' bit for bit:
//   without recompute 6k B s l h^2 (1 + 2s/(k h) + V/(k l h))    (k = 12: 72 B s l h^2 (...))
//   Megatron's        8k B s l h^2 (1 + 2s/(k h) + 3V/(4 k l h)) (k = 12: 96 B s l h^2 (...))
//   a recomputed forward of the layers: 2k B s l h^2 (1 + 2s/(k h)).
namespace {
double gemm_weight_factor(const ModelSpec& model) {
  const double h = static_cast<double>(model.hidden);
  return static_cast<double>(layer_matmul_params(model)) / (h * h);
}
}  // namespace

double megatron_model_flops(const ModelSpec& model, std::int64_t global_batch) {
  const double B = static_cast<double>(global_batch);
  const double s = static_cast<double>(model.seq_len);
  const double l = static_cast<double>(model.layers);
  const double h = static_cast<double>(model.hidden);
  const double V = static_cast<double>(model.vocab);
  const double k = gemm_weight_factor(model);
  return 8.0 * k * B * s * l * h * h * (1.0 + 2.0 * s / (k * h) + 3.0 * V / (4.0 * k * l * h));
}

double model_flops_without_recompute(const ModelSpec& model, std::int64_t global_batch) {
  const double B = static_cast<double>(global_batch);
  const double s = static_cast<double>(model.seq_len);
  const double l = static_cast<double>(model.layers);
  const double h = static_cast<double>(model.hidden);
  const double V = static_cast<double>(model.vocab);
  const double k = gemm_weight_factor(model);
  return 6.0 * k * B * s * l * h * h * (1.0 + 2.0 * s / (k * h) + V / (k * l * h));
}

double hardware_flops(const ModelSpec& model, std::int64_t global_batch, Recompute recompute) {
  const double B = static_cast<double>(global_batch);
  const double s = static_cast<double>(model.seq_len);
  const double l = static_cast<double>(model.layers);
  const double h = static_cast<double>(model.hidden);
  const double k = gemm_weight_factor(model);
  const double model_flops = model_flops_without_recompute(model, global_batch);
  switch (recompute) {
    case Recompute::kNone: return model_flops;
    // The attention core's forward again: 4 s h a token and layer.
    case Recompute::kSelective: return model_flops + 4.0 * B * s * s * h * l;
    case Recompute::kFull: return model_flops + 2.0 * k * B * s * l * h * h * (1.0 + 2.0 * s / (k * h));
  }
  return model_flops;
}

namespace {

double non_negative(JsonObjectReader& r, const std::string& key) {
  const double v = r.get_number(key);
  r.require_non_negative(key, v);
  return v;
}

TierBytes tiers_from_json(JsonObjectReader r) {
  TierBytes t;
  t.device = non_negative(r, "device");
  t.host = non_negative(r, "host");
  t.nvme = non_negative(r, "nvme");
  r.finish();
  return t;
}

Json tiers_to_json(const TierBytes& t) {
  return Json{{"device", t.device}, {"host", t.host}, {"nvme", t.nvme}};
}

// "transfers": every link's bytes, keys in SI bytes.
struct TransferField {
  const char* key;
  double TransferBytes::*field;
};
constexpr TransferField kTransfers[] = {
    {"device_to_host_bytes", &TransferBytes::device_to_host},
    {"host_to_device_bytes", &TransferBytes::host_to_device},
    {"host_to_nvme_bytes", &TransferBytes::host_to_nvme},
    {"nvme_to_host_bytes", &TransferBytes::nvme_to_host},
};

TransferBytes transfers_from_json(JsonObjectReader r) {
  TransferBytes t;
  for (const TransferField& f : kTransfers) t.*f.field = non_negative(r, f.key);
  r.finish();
  return t;
}

Json transfers_to_json(const TransferBytes& t) {
  Json j = Json::object();
  for (const TransferField& f : kTransfers) j[f.key] = t.*f.field;
  return j;
}

// The parts, in the order of the struct, with their JSON keys.
struct PartField {
  const char* key;
  double StepTimeParts::*field;
};
constexpr PartField kParts[] = {
    {"forward_s", &StepTimeParts::forward_s},     {"backward_s", &StepTimeParts::backward_s},
    {"recompute_s", &StepTimeParts::recompute_s}, {"tp_comm_s", &StepTimeParts::tp_comm_s},
    {"pp_comm_s", &StepTimeParts::pp_comm_s},     {"dp_comm_s", &StepTimeParts::dp_comm_s},
    {"offload_s", &StepTimeParts::offload_s},     {"optimizer_s", &StepTimeParts::optimizer_s},
    {"bubble_s", &StepTimeParts::bubble_s},       {"other_s", &StepTimeParts::other_s},
};

StepTimeParts parts_from_json(JsonObjectReader r) {
  StepTimeParts p;
  for (const PartField& f : kParts) p.*f.field = non_negative(r, f.key);
  r.finish();
  return p;
}

Json parts_to_json(const StepTimeParts& p) {
  Json j = Json::object();
  for (const PartField& f : kParts) j[f.key] = p.*f.field;
  return j;
}

}  // namespace

StepReport StepReport::from_json(const Json& json, const std::string& source) {
  JsonObjectReader r(json, source);
  StepReport s;
  s.kind = r.get_enum("kind", {"prediction", "measurement"});
  s.plan_label = r.get_string("plan_label");
  s.step_time_s = non_negative(r, "step_time_s");
  s.parts = parts_from_json(r.get_object("parts"));
  s.tokens_per_s = non_negative(r, "tokens_per_s");
  s.tflops_per_gpu = non_negative(r, "tflops_per_gpu");
  // Reports written before the model figure was added have none: 0, "not given".
  s.model_tflops_per_gpu = r.get_number_or("model_tflops_per_gpu", 0.0);
  r.require_non_negative("model_tflops_per_gpu", s.model_tflops_per_gpu);
  s.mfu = non_negative(r, "mfu");
  s.bubble_fraction = r.get_number("bubble_fraction");
  if (!(s.bubble_fraction >= 0 && s.bubble_fraction <= 1)) {
    r.fail("bubble_fraction", fmt::format("{}", s.bubble_fraction), "a fraction in [0, 1]");
  }
  s.memory_bytes = tiers_from_json(r.get_object("memory_bytes"));

  const Json& ranks = r.get_array("per_rank");
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    JsonObjectReader e(ranks[i], source, r.key_path(fmt::format("per_rank[{}]", i)));
    RankMemory m;
    m.rank = e.get_int("rank");
    e.require_non_negative("rank", static_cast<double>(m.rank));
    m.pp_rank = e.get_int("pp_rank");
    e.require_non_negative("pp_rank", static_cast<double>(m.pp_rank));
    m.peak_bytes = tiers_from_json(e.get_object("peak_bytes"));
    if (e.has("by_kind")) {
      JsonObjectReader kinds = e.get_object("by_kind");
      MemoryByKind b;
      for (const MemoryKind k : kMemoryKinds) {
        b[k] = tiers_from_json(kinds.get_object(std::string(to_string(k))));
      }
      kinds.finish();
      m.by_kind = b;
    }
    m.in_flight = e.get_int_or("in_flight", 0);
    e.require_non_negative("in_flight", static_cast<double>(m.in_flight));
    e.finish();
    s.per_rank.push_back(m);
  }

  const std::int64_t steps = r.get_int("steps_measured");
  r.require_non_negative("steps_measured", static_cast<double>(steps));
  s.steps_measured = steps;
  const Json& losses = r.get_array("losses");
  for (std::size_t i = 0; i < losses.size(); ++i) {
    // A diverged run's loss is still a number; NaN cannot be written in JSON at all.
    if (!losses[i].is_number()) {
      r.fail(fmt::format("losses[{}]", i), losses[i].dump(), "a number");
    }
    s.losses.push_back(losses[i].get<double>());
  }
  // Optional: only offload plans move bytes between tiers.
  if (r.has("transfers")) s.transfers = transfers_from_json(r.get_object("transfers"));
  s.stopped_by = r.get_enum_or("stopped_by", {"SIGINT", "SIGTERM"}, "");
  s.captured_steps = r.get_bool_or("captured_steps", false);
  if (r.has("inter_node_comm_s")) {
    s.inter_node_comm_s = r.get_number("inter_node_comm_s");
    r.require_non_negative("inter_node_comm_s", *s.inter_node_comm_s);
  }
  if (r.has("pipeline_idle")) {
    JsonObjectReader p = r.get_object("pipeline_idle");
    PipelineIdle idle;
    for (const Json& busy : p.get_array("stage_busy_s")) {
      if (!busy.is_number() || !(busy.get<double>() >= 0)) {
        p.fail("stage_busy_s", busy.dump(), "non-negative numbers");
      }
      idle.stage_busy_s.push_back(busy.get<double>());
    }
    idle.critical_rank = p.get_int("critical_rank");
    idle.busiest_rank = p.get_int("busiest_rank");
    const auto stages = static_cast<std::int64_t>(idle.stage_busy_s.size());
    for (const auto& [key, rank] : {std::pair{"critical_rank", idle.critical_rank},
                                    std::pair{"busiest_rank", idle.busiest_rank}}) {
      if (rank < 0 || rank >= stages) {
        p.fail(key, std::to_string(rank), fmt::format("a pipeline rank in 0..{}", stages - 1));
      }
    }
    idle.fill_drain_s = non_negative(p, "fill_drain_s");
    idle.imbalance_s = non_negative(p, "imbalance_s");
    p.finish();
    s.pipeline_idle = idle;
  }
  r.finish();
  return s;
}

PipelineIdle PipelineIdle::split(std::vector<double> stage_busy_s, std::int64_t critical_rank,
                                 double bubble_s) {
  PipelineIdle idle;
  idle.stage_busy_s = std::move(stage_busy_s);
  idle.critical_rank = critical_rank;
  const auto& busy = idle.stage_busy_s;
  idle.busiest_rank = std::max_element(busy.begin(), busy.end()) - busy.begin();
  const double behind = busy[static_cast<std::size_t>(idle.busiest_rank)] -
                        busy[static_cast<std::size_t>(critical_rank)];
  idle.imbalance_s = std::clamp(behind, 0.0, std::max(bubble_s, 0.0));
  idle.fill_drain_s = std::max(bubble_s, 0.0) - idle.imbalance_s;
  return idle;
}

StepReport StepReport::load(const std::string& path) {
  return from_json(read_json_file(path), path);
}

Json StepReport::to_json() const {
  Json ranks = Json::array();
  for (const RankMemory& m : per_rank) {
    Json rank{{"rank", m.rank}, {"pp_rank", m.pp_rank}, {"peak_bytes", tiers_to_json(m.peak_bytes)}};
    if (m.by_kind) {
      Json kinds = Json::object();
      for (const MemoryKind k : kMemoryKinds) {
        kinds[std::string(to_string(k))] = tiers_to_json((*m.by_kind)[k]);
      }
      rank["by_kind"] = std::move(kinds);
    }
    if (m.in_flight > 0) rank["in_flight"] = m.in_flight;
    ranks.push_back(std::move(rank));
  }
  Json j{{"kind", kind},
         {"plan_label", plan_label},
         {"step_time_s", step_time_s},
         {"parts", parts_to_json(parts)},
         {"tokens_per_s", tokens_per_s},
         {"tflops_per_gpu", tflops_per_gpu},
         {"model_tflops_per_gpu", model_tflops_per_gpu},
         {"mfu", mfu},
         {"bubble_fraction", bubble_fraction},
         {"memory_bytes", tiers_to_json(memory_bytes)},
         {"per_rank", ranks},
         {"steps_measured", steps_measured},
         {"losses", losses}};
  if (!transfers.empty()) j["transfers"] = transfers_to_json(transfers);
  if (!stopped_by.empty()) j["stopped_by"] = stopped_by;
  if (captured_steps) j["captured_steps"] = true;
  if (inter_node_comm_s) j["inter_node_comm_s"] = *inter_node_comm_s;
  if (pipeline_idle) {
    j["pipeline_idle"] = Json{{"stage_busy_s", pipeline_idle->stage_busy_s},
                              {"critical_rank", pipeline_idle->critical_rank},
                              {"busiest_rank", pipeline_idle->busiest_rank},
                              {"fill_drain_s", pipeline_idle->fill_drain_s},
                              {"imbalance_s", pipeline_idle->imbalance_s}};
  }
  return j;
}

}  // namespace strata
