// The CUDA pieces of `strata run` (see run_common.h) and `strata select` (cuda_pieces.h): the
// checks a CUDA job needs before any rank starts and the makers of a rank's CUDA backend. The
// training loops themselves are run.cc's and executor/select's, the same for every backend.
// Built without the CUDA toolkit, the functions say so (ConfigError) instead.
#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "executor/runtime/plan_checks.h"
#include "tools/strata/cuda_pieces.h"
#include "tools/strata/run_common.h"

#if STRATA_HAVE_CUDA
#include <cuda_runtime.h>

#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/device_probe.h"
#endif

namespace strata::cli {

#if STRATA_HAVE_CUDA

DeviceProbeFn cuda_device_probe() { return cuda::probe_cuda_device; }

int cuda_device_count() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  return devices;
}

engine::BackendMaker cuda_select_backend_maker() { return cuda::cuda_backend_maker(); }

void check_cuda_run(const RunOptions& o, const Validated& v) {
  check_plan_runs(v.model, v.train, v.plan, Backend::kCuda, o.prefetch_depth, v.plan_source());
  if (o.ranks_per_gpu < 1) {
    throw ConfigError(fmt::format("--ranks-per-gpu: value {}, expected >= 1", o.ranks_per_gpu));
  }
  const int devices = cuda_device_count();
  // Each node's ranks share its GPUs (local rank mod GPUs): on one machine all the plan's.
  const std::int64_t ranks = ranks_on_one_node(o, v);
  if (ranks > static_cast<std::int64_t>(devices) * o.ranks_per_gpu) {
    throw ConfigError(fmt::format(
        "{}: {} ranks on this node but this machine has {} GPU(s) and "
        "--ranks-per-gpu is {}; pass --ranks-per-gpu {} to share them (host-staged "
        "communicators) or use --backend cpu", v.plan_path, ranks, devices, o.ranks_per_gpu,
        devices > 0 ? (ranks + devices - 1) / devices : ranks));
  }
}

engine::BackendMaker cuda_backend_maker(const RunOptions& o) {
  cuda::CudaBackendOptions options;
  options.ranks_per_gpu = o.ranks_per_gpu;
  options.kernel_trace = o.kernel_trace;
  options.host_stream = !o.no_host_stream;
  options.capture_steps = o.cuda_graphs;
  const auto attention = kernels::cuda::attention_mode_from(o.attention);
  if (!attention) {
    throw ConfigError(fmt::format("--attention: value '{}', expected auto, cudnn or kernels",
                                  o.attention));
  }
  options.attention = *attention;
  return cuda::cuda_backend_maker(options);
}

#else

DeviceProbeFn cuda_device_probe() { return no_cuda_backend_probe; }

void check_cuda_run(const RunOptions&, const Validated&) {
  throw ConfigError("--backend cuda: this strata was built without the CUDA toolkit");
}

int cuda_device_count() { return 0; }

engine::BackendMaker cuda_select_backend_maker() {
  throw ConfigError("a CUDA cluster: this strata was built without the CUDA toolkit");
}

engine::BackendMaker cuda_backend_maker(const RunOptions&) {
  throw ConfigError("--backend cuda: this strata was built without the CUDA toolkit");
}

#endif

}  // namespace strata::cli
