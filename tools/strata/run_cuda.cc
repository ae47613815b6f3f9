// `strata run` on the CUDA backend: one GPU, one process, no MPI at run time. The same
// inputs, progress lines and files as the CPU ranks (report.json, trace.json,
// memory_tags.json), measured by the CUDA engine (executor/cuda/cuda_engine.h) with its
// device memory accounted through the DevicePool against the cluster's device budget.
// Built without the CUDA toolkit, the functions say so (ConfigError) instead.
// Deliberately not here: several GPUs (NCCL ranks), offload plans.
#include <chrono>
#include <filesystem>
#include <ostream>

#include <fmt/format.h>

#include "cost_model/errors.h"
#include "tools/strata/inputs.h"
#include "tools/strata/run_common.h"

#if STRATA_HAVE_CUDA
#include <cuda_runtime.h>

#include "executor/cuda/cuda_engine.h"
#include "executor/cuda/device_pool.h"
#include "executor/cuda/device_probe.h"
#include "executor/cuda/system_error.h"
#include "executor/data/batch.h"
#include "executor/data/corpus.h"
#include "executor/memory/accounting_allocator.h"
#include "executor/report/run_report.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_resources.h"
#endif

namespace strata::cli {

#if STRATA_HAVE_CUDA

DeviceProbeFn cuda_device_probe() { return cuda::probe_cuda_device; }

bool cuda_runs_plan(const Validated& v) {
  try {
    cuda::CudaEngine::check_supported(v.model, v.plan);
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

void train_on_cuda(const RunOptions& o, const Validated& v, std::ostream& out) {
  namespace fs = std::filesystem;
  cuda::CudaEngine::check_supported(v.model, v.plan);
  if (!o.update_profile.empty()) {
    throw ConfigError("--update-profile: the profile's rates are the CPU backend's; "
                      "calibrating from a GPU run is not implemented yet (use --backend cpu)");
  }
  const std::vector<std::uint8_t> corpus =
      o.data.empty() ? data::generated_corpus(v.train.seed, data::kGeneratedCorpusBytes)
                     : data::load_byte_file(o.data, v.model.seq_len + 1, "--data");
  const data::BatchSampler sampler(corpus, v.train.seed, v.model.seq_len);
  TierBudgets budgets = TierBudgets::per_rank(v.cluster);
  if (o.device_budget_mib > 0) {
    budgets.device_bytes = static_cast<std::int64_t>(o.device_budget_mib * (1 << 20));
  }
  AccountingAllocator alloc(budgets);
  const kernels::cuda::Stream stream =
      cuda::as_system_error([] { return kernels::cuda::Stream::create(); });
  cuda::DevicePool pool(alloc, stream.get());
  cuda::CudaEngine engine(v.model, v.train, v.plan, pool, sampler);
  cudaDeviceProp prop{};
  cuda::as_system_error([&] { CUDA_CHECK(cudaGetDeviceProperties(&prop, 0)); });
  out << fmt::format("strata run: {} on 1 GPU ({}, CUDA backend, bf16), model {}, {} steps of {} "
                     "sequences x {} tokens, data {}\n",
                     v.plan.label(), prop.name, v.model.name, v.train.steps, v.train.global_batch,
                     v.model.seq_len, o.data.empty() ? "generated" : o.data);
  std::vector<report::StepSample> samples;
  std::vector<double> losses;
  std::vector<TraceEvent> last_events;
  const double tokens = static_cast<double>(v.train.global_batch * v.model.seq_len);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t s = 0; s < v.train.steps; ++s) {
    engine::StepResult r = engine.step(s);
    samples.push_back({r.step_s, r.parts});
    losses.push_back(r.loss);
    last_events = std::move(r.events);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double eta = elapsed / static_cast<double>(s + 1) * static_cast<double>(v.train.steps - s - 1);
    out << fmt::format("step {:>5}/{}  loss {:.4f}  {:>9.0f} tokens/s  ETA {:.1f} s\n", s + 1,
                       v.train.steps, r.loss, tokens / r.step_s, eta)
        << std::flush;
  }
  report::RankSummary mine;
  mine.rank = 0;
  mine.peak_bytes = alloc.peak_bytes();
  mine.tags = alloc.tags();
  mine.steps = std::move(samples);
  mine.trace = std::move(last_events);
  const std::vector<report::RankSummary> summaries{mine};
  const StepReport rep = report::build_run_report(v.model, v.cluster, v.train, v.plan, summaries, losses);
  const fs::path dir(o.out);
  write_json_file((dir / "report.json").string(), rep.to_json());
  write_chrome_trace((dir / "trace.json").string(), report::build_run_trace(summaries));
  write_json_file((dir / "memory_tags.json").string(), report::memory_tags_json(summaries));
  const cuda::DevicePoolStats pool_stats = pool.stats();
  out << fmt::format("median step {:.4f} s, {:.0f} tokens/s, {:.1f} TFLOP/s per GPU (MFU {}), "
                     "peak device memory {} GiB accounted, {} GiB held by the pool\n",
                     rep.step_time_s, rep.tokens_per_s, rep.tflops_per_gpu, percent(rep.mfu),
                     gib(rep.memory_bytes.device), gib(static_cast<double>(pool_stats.peak_reserved_bytes)));
  print_predicted(v, rep, o.profile, out);
  out << fmt::format("wrote {}/report.json, trace.json, memory_tags.json\n", o.out);
}

#else

DeviceProbeFn cuda_device_probe() { return no_cuda_backend_probe; }

bool cuda_runs_plan(const Validated&) { return false; }

void train_on_cuda(const RunOptions&, const Validated&, std::ostream&) {
  throw ConfigError("--backend cuda: this strata was built without the CUDA toolkit");
}

#endif

}  // namespace strata::cli
