// The CPU compute calibration: a list of steps, run in order with progress; see
// calibration.h.
#include "executor/calibrate/calibration.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cost_model/pricing/compute_model.h"
#include "cost_model/specs/conventions.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/profile.h"
#include "executor/calibrate/compute_bench.h"
#include "executor/calibrate/compute_profile.h"
#include "executor/calibrate/last_level_cache.h"
#include "executor/calibrate/llama_op_bench.h"
#include "executor/calibrate/memory_bench.h"
#include "executor/cpu/cpu_layer_ops.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/swiglu.h"

namespace strata::calibrate {

void set_memory_working_set(ComputeCalibrationOptions& options, std::int64_t bytes) {
  options.memory_working_set_bytes = bytes;
  options.adam_params = bytes / 16;  // parameter, gradient, two moments: 16 bytes read each
  options.copy_bytes = bytes / 4;    // one of the four arrays into another
}

ComputeCalibrationOptions compute_options(std::vector<ModelSpec> models, bool quick) {
  ComputeCalibrationOptions o;
  o.models = std::move(models);
  const LastLevelCache llc = last_level_cache();
  o.last_level_cache_bytes = llc.bytes;
  const std::int64_t out_of_cache = kOutOfCacheFactor * llc.bytes;
  if (quick) {
    o.backward = false;
    o.timing = {3, 0.005};
    o.large_timing = {1, 0.0};
    set_memory_working_set(o, std::min(out_of_cache, kQuickMemoryBytes));
  } else {
    o.timing = {5, 0.02};
    o.large_timing = {2, 0.0};
    set_memory_working_set(o, out_of_cache);
  }
  return o;
}

std::string describe_machine() {
  char host[256] = {};
  const std::string hostname = gethostname(host, sizeof(host) - 1) == 0 ? host : "unknown";
  std::string cpu = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) cpu = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  }
  return fmt::format("{}: {}, {} hardware threads", hostname, cpu,
                     std::thread::hardware_concurrency());
}

namespace {

// Rough rates of a 2-core machine, only to weight the progress bar's steps.
constexpr double kGuessFlopsPerS = 1e11;
constexpr double kGuessBytesPerS = 1e10;

// Sets the OpenMP and OpenBLAS thread counts for a scope and restores them (n = 0: no-op).
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : omp_(omp_get_max_threads()), blas_(openblas_get_num_threads()) {
    if (n > 0) set(n, n);
  }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;
  ~ScopedThreads() { set(omp_, blas_); }

 private:
  static void set(int omp, int blas) {
    omp_set_num_threads(omp);
    kernels::cpu::set_blas_threads(blas);
  }
  int omp_;
  int blas_;
};

// Llama's operators through the CPU backend's LayerOps on the accounting allocator's host
// memory, timed on the wall clock.
LlamaOpSeconds measure_cpu_llama_ops(const LlamaOpShape& shape, const TimingOptions& timing) {
  AccountingAllocator memory;
  cpu_backend::CpuLayerOps ops(memory);
  LlamaOpBackend backend;
  backend.ops = &ops;
  backend.seconds = [&timing](const std::function<void()>& call) {
    return median_call_seconds(call, timing);
  };
  backend.fill = [](const engine::Tensor& t, std::uint32_t seed) {
    const std::vector<float> values = bench_values(t.size(), seed);
    std::copy(values.begin(), values.end(), t.f32());
  };
  // CpuLayerOps::matmul_swiglu_backward's last two steps.
  backend.swiglu_backward = [](void* dinp, const void* pre, const void* dout, int BT, int F) {
    kernels::cpu::zero(static_cast<float*>(dinp), static_cast<std::int64_t>(BT) * 2 * F);
    kernels::cpu::swiglu_backward(static_cast<float*>(dinp), static_cast<const float*>(pre),
                                  static_cast<const float*>(dout), BT, F);
  };
  return measure_llama_ops(backend, shape);
}

}  // namespace

HostMemoryRates measure_cpu_host_memory(const ComputeCalibrationOptions& options) {
  ScopedThreads scope(options.adam_threads);
  HostArrays arrays(options.memory_working_set_bytes);
  return measure_host_memory(arrays, options.timing);
}

double expected_s(double call_s, const TimingOptions& timing) {
  return call_s + timing.repeats * std::max(call_s, timing.min_repeat_s);
}

const ModelSpec& elementwise_model(const ComputeCalibrationOptions& options) {
  if (options.models.empty()) throw ConfigError("calibrate: no model given for GEMM shapes");
  const auto size = [&](const ModelSpec& m) {
    return static_cast<double>(options.micro_batch) * m.seq_len * m.hidden;
  };
  return *std::max_element(
      options.models.begin(), options.models.end(),
      [&](const ModelSpec& a, const ModelSpec& b) { return size(a) < size(b); });
}

ModelSpec llama_ops_model(const ComputeCalibrationOptions& options) {
  const ModelSpec& largest = elementwise_model(options);
  const auto llama_like = [](const ModelSpec& m) {
    return m.norm == NormKind::kRmsNorm || m.mlp == MlpKind::kSwiglu ||
           m.position == PositionKind::kRope || m.kv_head_count() < m.heads;
  };
  const auto size = [](const ModelSpec& m) { return static_cast<double>(m.seq_len) * m.hidden; };
  const ModelSpec* best = nullptr;
  for (const ModelSpec& m : options.models) {
    if (llama_like(m) && (best == nullptr || size(m) > size(*best))) best = &m;
  }
  if (best != nullptr) return *best;
  ModelSpec llama = largest;
  llama.name = largest.name + " as a Llama layer";
  llama.norm = NormKind::kRmsNorm;
  llama.mlp = MlpKind::kSwiglu;
  llama.position = PositionKind::kRope;
  llama.rope_theta = 500000.0;
  // Groups of the fewest query heads (2 where the heads are even; GPT-2 1.5B's 25 in 5s)
  // whose KV heads options.tp splits or gives each rank one of; none when no group does.
  llama.kv_heads = largest.heads;
  for (std::int64_t group = 2; group <= largest.heads; ++group) {
    const std::int64_t kv = largest.heads / group;
    if (largest.heads % group == 0 && (kv % options.tp == 0 || options.tp % kv == 0)) {
      llama.kv_heads = kv;
      break;
    }
  }
  llama.biases = false;
  llama.tied_output = false;
  return llama;
}

std::vector<std::pair<std::string, LinearShape>> calibration_layers(
    const ComputeCalibrationOptions& options) {
  if (options.models.empty()) throw ConfigError("calibrate: no model given for GEMM shapes");
  const std::vector<std::int64_t> micro_batches =
      options.gemm_micro_batches.empty() ? std::vector<std::int64_t>{options.micro_batch}
                                         : options.gemm_micro_batches;
  const std::vector<std::int64_t> tps =
      options.gemm_tps.empty() ? std::vector<std::int64_t>{options.tp} : options.gemm_tps;
  std::vector<std::pair<std::string, LinearShape>> layers;  // (model name, layer)
  for (const ModelSpec& model : options.models) {
    model_linear_shapes(model, options.micro_batch, options.tp);  // validates options.tp
    for (std::int64_t mb : micro_batches) {
      for (std::int64_t tp : tps) {
        if (tp < 1 || model.heads % tp != 0 || model.ffn_hidden % tp != 0 ||
            model.vocab % tp != 0) {
          continue;
        }
        for (const LinearShape& layer : model_linear_shapes(model, mb, tp)) {
          layers.emplace_back(model.name, layer);
        }
      }
    }
  }
  // Passes of the same GEMM shape are timed once (gemm_samples merges by shape anyway); the
  // epilogues make a different GEMM on CUDA.
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool, bool, bool, bool>>
      seen;
  std::vector<std::pair<std::string, LinearShape>> unique;
  for (const auto& named : layers) {
    const LinearShape& l = named.second;
    if (seen.insert({l.BT, l.C, l.OC, l.bias, l.gelu_epilogue, l.residual_epilogue,
                     l.dgelu_epilogue, l.vocab_rows})
            .second) {
      unique.push_back(named);
    }
  }
  return unique;
}

std::vector<GemmPass> calibration_passes(const ComputeCalibrationOptions& options) {
  std::vector<GemmPass> passes = {GemmPass::kForward};
  if (options.backward) {
    passes.insert(passes.end(), {GemmPass::kBackwardInput, GemmPass::kBackwardWeight});
  }
  return passes;
}

void run_steps(const std::vector<CalibrationStep>& steps, const Progress& progress) {
  double total = 0;
  for (const CalibrationStep& s : steps) total += s.weight;
  double done = 0;
  for (const CalibrationStep& s : steps) {
    if (progress) progress(total > 0 ? done / total : 0.0, s.name);
    s.run();
    done += s.weight;
  }
  if (progress) progress(1.0, "done");
}

Profile calibrate_compute(const ComputeCalibrationOptions& options, const Progress& progress) {
  const ModelSpec& largest = elementwise_model(options);
  const std::vector<std::pair<std::string, LinearShape>> layers = calibration_layers(options);
  ComputeMeasurements measured;
  double busy_cores_slowdown = 0;
  std::vector<CalibrationStep> steps;
  if (options.busy_cores >= 2 && !layers.empty()) {
    // First, before any multi-threaded kernel: the forked processes copy this one.
    const LinearShape layer = layers.front().second;
    steps.push_back({fmt::format("all {} cores busy ({}x{}x{} + GeLU)", options.busy_cores,
                                 layer.BT, layer.C, layer.OC),
                     14 * expected_s(2.0 * layer.BT * layer.C * layer.OC / kGuessFlopsPerS,
                                    options.timing),
                     [&busy_cores_slowdown, layer, &options] {
                       ScopedThreads threads(options.kernel_threads);
                       busy_cores_slowdown = measure_busy_cores_slowdown(
                           layer, options.busy_cores, options.timing);
                     }});
  }
  for (const auto& named : layers) {
    const LinearShape layer = named.second;
    for (GemmPass pass : calibration_passes(options)) {
      const double flops = 2.0 * layer.BT * layer.C * layer.OC;
      const TimingOptions& timing = flops > kLargeGemmFlops ? options.large_timing : options.timing;
      steps.push_back({fmt::format("gemm {} {} {} ({}x{}x{})", named.first, layer.name,
                                   to_string(pass), layer.BT, layer.C, layer.OC),
                       expected_s(flops / kGuessFlopsPerS, timing),
                       [&measured, layer, pass, &timing, &options] {
                         ScopedThreads threads(options.kernel_threads);
                         measured.gemms.push_back(measure_linear(layer, pass, timing));
                       }});
    }
  }
  const std::int64_t BT = options.micro_batch * largest.seq_len;
  const double layer_bytes = 4.0 * BT * largest.hidden * sizeof(float);
  steps.push_back({fmt::format("elementwise ({}x{})", BT, largest.hidden),
                   3 * expected_s(3 * layer_bytes / kGuessBytesPerS, options.timing), [&] {
                     ScopedThreads threads(options.kernel_threads);
                     measured.layer_elementwise_s = measure_layer_elementwise_s(
                         BT, largest.hidden, largest.ffn_hidden, options.timing);
                   }});
  if (options.backward) {
    steps.push_back({fmt::format("elementwise backward ({}x{})", BT, largest.hidden),
                     3 * expected_s(4 * layer_bytes / kGuessBytesPerS, options.timing), [&] {
                       ScopedThreads threads(options.kernel_threads);
                       measured.layer_elementwise_backward_s = measure_layer_elementwise_backward_s(
                           BT, largest.hidden, largest.ffn_hidden, options.timing);
                     }});
    steps.push_back({fmt::format("attention backward (T={}, heads={})", largest.seq_len,
                                 largest.heads / options.tp),
                     expected_s(8.0 * BT * largest.seq_len * largest.hidden / kGuessFlopsPerS * 10,
                                options.timing),
                     [&] {
                       ScopedThreads threads(options.kernel_threads);
                       measured.attention_backward_s = measure_attention_backward_s(
                           options.micro_batch, largest.seq_len, largest.hidden / options.tp,
                           largest.heads / options.tp, options.timing);
                     }});
  }
  steps.push_back({fmt::format("attention (T={}, heads={})", largest.seq_len, largest.heads / options.tp),
                   expected_s(4.0 * BT * largest.seq_len * largest.hidden / kGuessFlopsPerS * 10,
                              options.timing),
                   [&] {
                     ScopedThreads threads(options.kernel_threads);
                     measured.attention_s = measure_attention_s(
                         options.micro_batch, largest.seq_len, largest.hidden / options.tp,
                         largest.heads / options.tp, options.timing);
                   }});
  const ModelSpec llama = llama_ops_model(options);
  const LlamaOpShape llama_shape =
      llama_op_shape(llama, options.micro_batch, options.tp, options.backward);
  const double llama_bytes = 40.0 * llama_shape.dims.BT() * llama_shape.dims.C * sizeof(float);
  steps.push_back({fmt::format("llama operators ({}: RMSNorm, SwiGLU, rotary, attention at head "
                               "sizes {})", llama.name,
                               fmt::join(llama_shape.attention_head_sizes, ", ")),
                   expected_s(llama_bytes / kGuessBytesPerS, options.timing) *
                       (options.backward ? 12.0 : 6.0),
                   [&] {
                     ScopedThreads threads(options.kernel_threads);
                     measured.llama = measure_cpu_llama_ops(llama_shape, options.timing);
                   }});
  // Host memory out of cache: one set of arrays for the bandwidth, both AdamW rates and the
  // copies (first-touching them is most of these steps' time on a VM).
  std::optional<HostArrays> arrays;
  const double memory_bytes = static_cast<double>(options.memory_working_set_bytes);
  steps.push_back({fmt::format("host memory and adamw ({} MiB, {} threads)",
                               options.memory_working_set_bytes >> 20, options.adam_threads),
                   2 * memory_bytes / kGuessBytesPerS +
                       expected_s(5 * memory_bytes / kGuessBytesPerS, options.timing),
                   [&] {
                     ScopedThreads threads(options.adam_threads);
                     arrays.emplace(options.memory_working_set_bytes);
                     // The two rates alternate on the same arrays, so noise hits both alike;
                     // still, a burst that slowed the bandwidth kernels more than AdamW can
                     // put AdamW above what the bandwidth carries, a profile the loader
                     // refuses (profile.h, kAdamOverMemoryTolerance): measured again then,
                     // three rounds at most, and the last one kept (the loader says why).
                     HostMemoryRates rates;
                     for (int round = 0; round < 3; ++round) {
                       rates = measure_host_memory(*arrays, options.timing);
                       if (rates.adam_params_per_s * kCpuAdamBytesPerParam <=
                           kAdamOverMemoryTolerance * rates.bandwidth.best()) {
                         break;
                       }
                     }
                     measured.host_memory_bytes_per_s = rates.bandwidth.best();
                     measured.cpu_adam_params_per_s = rates.adam_params_per_s;
                   }});
  steps.push_back({fmt::format("adamw ({} params, {} threads)", options.adam_params,
                               options.kernel_threads),
                   expected_s(memory_bytes * 28 / 16 / kGuessBytesPerS, options.timing), [&] {
                     if (options.adam_threads == options.kernel_threads) {
                       measured.device_adam_params_per_s = measured.cpu_adam_params_per_s;
                       return;
                     }
                     ScopedThreads threads(options.kernel_threads);
                     measured.device_adam_params_per_s =
                         measure_adamw_params_per_s(*arrays, options.timing);
                   }});
  steps.push_back({fmt::format("copy ({} MiB)", options.copy_bytes >> 20),
                   expected_s(memory_bytes / 2 / kGuessBytesPerS, options.timing), [&] {
                     ScopedThreads threads(options.kernel_threads);
                     const double rate = measure_copy_bytes_per_s(*arrays, options.timing);
                     measured.host_to_device_bytes_per_s = rate;
                     measured.device_to_host_bytes_per_s = rate;
                   }});
  run_steps(steps, progress);

  // The CPU backend's kernels (cost_model.cc's choice for a cpu cluster): materialized
  // attention, no dropout, biases in passes of their own; fp32.
  MeasuredAt at;
  at.model = largest;
  at.llama_model = llama;
  at.micro_batch = options.micro_batch;
  at.tp = options.tp;
  at.kernels = layer_kernels(executor_conventions(Backend::kCpu));
  at.element_bytes = 4.0;
  measured.memory_working_set_bytes = options.memory_working_set_bytes;
  measured.last_level_cache_bytes = options.last_level_cache_bytes;
  Profile profile = compute_profile(measured, at);
  profile.machine = describe_machine();
  if (options.kernel_threads > 0) {
    profile.machine += fmt::format("; kernels timed at {} thread(s) per rank", options.kernel_threads);
  }
  profile.backend = "cpu";
  profile.threads_per_rank = std::max(options.kernel_threads, 1);
  if (options.busy_cores >= 2 && !layers.empty()) {
    profile.busy_cores = options.busy_cores;
    profile.busy_cores_slowdown = busy_cores_slowdown;
    profile.busy_cores_slowdown_asks = {busy_cores_slowdown};
  }
  return profile;
}

}  // namespace strata::calibrate
