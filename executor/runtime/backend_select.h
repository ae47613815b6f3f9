// Choosing the executor's backend at run time: "cuda" when forced or when the device probe
// finds a GPU, "cpu" otherwise (docs/design.md: the CPU backend is first-class, not a fallback
// mock). Forcing cuda where the probe finds no device is a ConfigError that carries the
// probe's reason.
//
// The probe is injected rather than looked up here: this file is plain C++ in strata_executor
// (built on every machine), while the only honest probe, cudaGetDeviceCount, lives in the
// CUDA-only library (executor/cuda/device_probe.h: probe_cuda_device). A binary built with
// CUDA passes that probe; one built without passes no_cuda_backend_probe, so it never picks a
// backend it does not contain even on a machine with a GPU. Deliberately no dlopen of
// libcudart and no registration hook (either would be hidden global state).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "cost_model/specs/cluster_spec.h"

namespace strata {

// Backend (kCpu | kCuda) and its to_string are the cluster spec's (a cluster names the
// backend its devices run).

// What a device probe found: available, or why not ("cudaGetDeviceCount found 0 devices").
struct DeviceProbe {
  bool available = false;
  std::string reason;
};
using DeviceProbeFn = std::function<DeviceProbe()>;

// The probe of a binary built without the CUDA backend: never available.
DeviceProbe no_cuda_backend_probe();

// forced: the --backend flag's value if given ("cpu" or "cuda"). The probe runs only when
// needed (forced cuda, or nothing forced). Throws ConfigError for an unknown backend name and
// for "--backend cuda: no CUDA device: <reason>".
Backend choose_backend(const std::optional<std::string>& forced, const DeviceProbeFn& probe);

}  // namespace strata
