// The CUDA calibration's defaults and shape checks; see gpu_options.h.
#include "executor/calibrate/gpu_options.h"

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata::calibrate {
namespace {

void require_multiple_of_8(const ModelSpec& model, const char* what, std::int64_t value,
                           std::int64_t tp) {
  if (value % 8 != 0) {
    throw ConfigError(fmt::format(
        "calibrate --backend cuda: model '{}': {} / tp = {} at tp {}; the CUDA kernels need a "
        "multiple of 8 (16-byte bf16 rows)", model.name, what, value, tp));
  }
}

}  // namespace

ComputeCalibrationOptions gpu_compute_options(std::vector<ModelSpec> models, bool quick) {
  ComputeCalibrationOptions o = compute_options(std::move(models), quick);
  o.backward = true;
  o.large_timing = o.timing;
  return o;
}

void check_cuda_shapes(const ComputeCalibrationOptions& options) {
  if (options.models.empty()) throw ConfigError("calibrate: no model given for GEMM shapes");
  std::vector<std::int64_t> tps = options.gemm_tps;
  tps.push_back(options.tp);
  for (const ModelSpec& model : options.models) {
    const std::int64_t head_size = model.hidden / model.heads;
    if (head_size * model.heads != model.hidden || (head_size != 64 && head_size != 128)) {
      throw ConfigError(fmt::format(
          "calibrate --backend cuda: model '{}': hidden / heads = {} / {}; the CUDA attention "
          "kernel supports head size 64 or 128", model.name, model.hidden, model.heads));
    }
    for (std::int64_t tp : tps) {
      if (tp < 1 || model.heads % tp != 0 || model.ffn_hidden % tp != 0 ||
          model.vocab % tp != 0) {
        continue;
      }
      require_multiple_of_8(model, "hidden", model.hidden / tp, tp);
      require_multiple_of_8(model, "ffn_hidden", model.ffn_hidden / tp, tp);
    }
  }
}

}  // namespace strata::calibrate
