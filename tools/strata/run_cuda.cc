// The CUDA pieces of `strata run` (see run_common.h): the checks a CUDA run needs before any
// rank starts and the maker of a rank's CUDA backend. The training loop itself is run.cc's,
// the same for every backend. Built without the CUDA toolkit, the functions say so
// (ConfigError) instead.
#include <fmt/format.h>

#include "cost_model/errors.h"
#include "tools/strata/run_common.h"

#if STRATA_HAVE_CUDA
#include <cuda_runtime.h>

#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/device_probe.h"
#endif

namespace strata::cli {

#if STRATA_HAVE_CUDA

DeviceProbeFn cuda_device_probe() { return cuda::probe_cuda_device; }

void check_cuda_run(const RunOptions& o, const Validated& v) {
  const ModelSpec& model = v.model;
  const std::int64_t head_size = model.hidden / model.heads;
  if (head_size != 64 && head_size != 128) {
    throw ConfigError(fmt::format(
        "{}: hidden / heads = {} / {} = {}; the CUDA attention kernel supports head size 64 or "
        "128 (use --backend cpu)", v.model_path, model.hidden, model.heads, head_size));
  }
  const std::int64_t local_width = model.hidden / v.plan.tp;
  if (local_width % 8 != 0 || (model.ffn_hidden / v.plan.tp) % 8 != 0) {
    throw ConfigError(fmt::format("{}: hidden / tp = {} and ffn_hidden / tp = {} must be multiples "
                                  "of 8 on the CUDA backend (16-byte aligned bf16 rows)",
                                  v.model_path, local_width, model.ffn_hidden / v.plan.tp));
  }
  if (v.train.precision != Precision::kBf16) {
    throw ConfigError(fmt::format("{}: precision {}: the CUDA backend trains in bf16 mixed "
                                  "precision (fp32 master weights); set \"precision\": \"bf16\"",
                                  v.train_path, to_string(v.train.precision)));
  }
  if (o.ranks_per_gpu < 1) {
    throw ConfigError(fmt::format("--ranks-per-gpu: value {}, expected >= 1", o.ranks_per_gpu));
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  const std::int64_t ranks = v.plan.world_size();
  if (ranks > static_cast<std::int64_t>(devices) * o.ranks_per_gpu) {
    throw ConfigError(fmt::format(
        "{}: the plan needs tp*pp*dp = {} ranks but this machine has {} GPU(s) and "
        "--ranks-per-gpu is {}; pass --ranks-per-gpu {} to share them (host-staged "
        "communicators) or use --backend cpu", v.plan_path, ranks, devices, o.ranks_per_gpu,
        devices > 0 ? (ranks + devices - 1) / devices : ranks));
  }
}

engine::BackendMaker cuda_backend_maker(const RunOptions& o) {
  cuda::CudaBackendOptions options;
  options.ranks_per_gpu = o.ranks_per_gpu;
  return cuda::cuda_backend_maker(options);
}

#else

DeviceProbeFn cuda_device_probe() { return no_cuda_backend_probe; }

void check_cuda_run(const RunOptions&, const Validated&) {
  throw ConfigError("--backend cuda: this strata was built without the CUDA toolkit");
}

engine::BackendMaker cuda_backend_maker(const RunOptions&) {
  throw ConfigError("--backend cuda: this strata was built without the CUDA toolkit");
}

#endif

}  // namespace strata::cli
