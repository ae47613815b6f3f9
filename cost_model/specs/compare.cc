// Field-by-field comparison of two StepReports; see compare.h. Pure: no I/O.
#include "cost_model/specs/compare.h"

#include <nlohmann/json.hpp>

namespace strata {

std::optional<double> relative_error(double predicted, double measured) {
  if (measured == 0) {
    if (predicted == 0) return 0.0;
    return std::nullopt;
  }
  return (predicted - measured) / measured;
}

const FieldComparison* ReportComparison::find(const std::string& key) const {
  for (const FieldComparison& f : fields) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

namespace {

// One row: the key, its table label and unit, and how to read the value from a report.
struct Row {
  const char* key;
  const char* label;
  const char* unit;
  double (*value)(const StepReport&);
};

// The order of StepReport's fields (step_report.h), parts indented under the step time.
constexpr Row kRows[] = {
    {"step_time_s", "step time", "s", [](const StepReport& r) { return r.step_time_s; }},
    {"parts.forward_s", "  forward", "s", [](const StepReport& r) { return r.parts.forward_s; }},
    {"parts.backward_s", "  backward", "s",
     [](const StepReport& r) { return r.parts.backward_s; }},
    {"parts.recompute_s", "  recompute", "s",
     [](const StepReport& r) { return r.parts.recompute_s; }},
    {"parts.tp_comm_s", "  tp comm", "s", [](const StepReport& r) { return r.parts.tp_comm_s; }},
    {"parts.pp_comm_s", "  pp comm", "s", [](const StepReport& r) { return r.parts.pp_comm_s; }},
    {"parts.dp_comm_s", "  dp comm", "s", [](const StepReport& r) { return r.parts.dp_comm_s; }},
    {"parts.offload_s", "  offload", "s", [](const StepReport& r) { return r.parts.offload_s; }},
    {"parts.optimizer_s", "  optimizer", "s",
     [](const StepReport& r) { return r.parts.optimizer_s; }},
    {"parts.bubble_s", "  bubble", "s", [](const StepReport& r) { return r.parts.bubble_s; }},
    {"parts.other_s", "  other", "s", [](const StepReport& r) { return r.parts.other_s; }},
    {"tokens_per_s", "tokens/s", "tokens/s", [](const StepReport& r) { return r.tokens_per_s; }},
    {"tflops_per_gpu", "TFLOP/s per GPU (hardware)", "TFLOP/s",
     [](const StepReport& r) { return r.tflops_per_gpu; }},
    {"model_tflops_per_gpu", "model TFLOP/s per GPU", "TFLOP/s",
     [](const StepReport& r) { return r.model_tflops_per_gpu; }},
    {"mfu", "MFU", "fraction", [](const StepReport& r) { return r.mfu; }},
    {"bubble_fraction", "bubble share", "fraction",
     [](const StepReport& r) { return r.bubble_fraction; }},
    {"memory_bytes.device", "memory device", "bytes",
     [](const StepReport& r) { return r.memory_bytes.device; }},
    {"memory_bytes.host", "memory host", "bytes",
     [](const StepReport& r) { return r.memory_bytes.host; }},
    {"memory_bytes.nvme", "memory nvme", "bytes",
     [](const StepReport& r) { return r.memory_bytes.nvme; }},
};

}  // namespace

ReportComparison compare_reports(const StepReport& predicted, const StepReport& measured) {
  ReportComparison c;
  c.predicted_label = predicted.plan_label;
  c.measured_label = measured.plan_label;
  for (const Row& row : kRows) {
    FieldComparison f;
    f.key = row.key;
    f.label = row.label;
    f.unit = row.unit;
    f.predicted = row.value(predicted);
    f.measured = row.value(measured);
    f.relative_error = relative_error(f.predicted, f.measured);
    c.fields.push_back(std::move(f));
    // After the parts: how much of the tp/pp/dp comm crossed nodes, when both reports tell
    // it (jobs across nodes; reports written before it have none).
    if (std::string(row.key) == "parts.other_s" && predicted.inter_node_comm_s &&
        measured.inter_node_comm_s) {
      FieldComparison share;
      share.key = "inter_node_comm_s";
      share.label = "  of comm, inter-node";
      share.unit = "s";
      share.predicted = *predicted.inter_node_comm_s;
      share.measured = *measured.inter_node_comm_s;
      share.relative_error = relative_error(share.predicted, share.measured);
      c.fields.push_back(std::move(share));
    }
  }
  // The worst rank's device bytes by kind, side by side, when both reports tell them (a
  // report written before the kinds has none).
  const RankMemory* p = worst_device_rank(predicted.per_rank);
  const RankMemory* m = worst_device_rank(measured.per_rank);
  if (p != nullptr && m != nullptr && p->by_kind && m->by_kind) {
    for (const MemoryKind k : kMemoryKinds) {
      FieldComparison f;
      f.key = "memory_by_kind." + std::string(to_string(k)) + ".device";
      f.label = "  device " + std::string(to_string(k));
      f.unit = "bytes";
      f.predicted = (*p->by_kind)[k].device;
      f.measured = (*m->by_kind)[k].device;
      f.relative_error = relative_error(f.predicted, f.measured);
      c.fields.push_back(std::move(f));
    }
  }
  return c;
}

Json comparison_to_json(const ReportComparison& comparison) {
  Json fields = Json::array();
  for (const FieldComparison& f : comparison.fields) {
    fields.push_back(Json{{"key", f.key},
                          {"unit", f.unit},
                          {"predicted", f.predicted},
                          {"measured", f.measured},
                          {"relative_error", f.relative_error ? Json(*f.relative_error)
                                                              : Json(nullptr)}});
  }
  return Json{{"predicted_plan", comparison.predicted_label},
              {"measured_plan", comparison.measured_label},
              {"fields", fields}};
}

}  // namespace strata
