// choose_backend: the decision table of backend_select.h. No CUDA here (see the header).
#include "executor/runtime/backend_select.h"

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata {

DeviceProbe no_cuda_backend_probe() {
  return {false, "this strata binary was built without the CUDA backend (no CUDA toolkit at "
                 "configure time, or STRATA_ENABLE_CUDA=OFF)"};
}

Backend choose_backend(const std::optional<std::string>& forced, const DeviceProbeFn& probe) {
  if (forced && *forced == "cpu") return Backend::kCpu;
  if (forced && *forced != "cuda") {
    throw ConfigError(fmt::format("--backend: '{}' is not a backend; expected cpu or cuda",
                                  *forced));
  }
  if (!probe) {
    throw ConfigError("choose_backend: no device probe given (pass no_cuda_backend_probe in a "
                      "build without CUDA)");
  }
  const DeviceProbe found = probe();
  if (found.available) return Backend::kCuda;
  if (forced) {
    throw ConfigError(fmt::format("--backend cuda: no CUDA device: {}", found.reason));
  }
  return Backend::kCpu;
}

}  // namespace strata
