// The CUDA compute calibration: the shared step list over the CUDA benches, then the
// headroom; see cuda_calibration.h.
#include "executor/calibrate/cuda_calibration.h"

#include <algorithm>
#include <string>

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cost_model/pricing/compute_model.h"
#include "cost_model/specs/conventions.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/units.h"
#include "executor/calibrate/compute_profile.h"
#include "executor/calibrate/cuda_compute_bench.h"
#include "executor/calibrate/cuda_headroom.h"
#include "executor/calibrate/cuda_llama_ops.h"
#include "executor/calibrate/gpu_options.h"
#include "executor/cuda/system_error.h"
#include "kernels/cuda/cuda_check.h"

namespace strata::calibrate {
namespace {

// Rough rates of a current GPU, only to weight the progress bar's steps.
constexpr double kGuessFlopsPerS = 3e14;
constexpr double kGuessBytesPerS = 1e12;
constexpr double kGuessCopyBytesPerS = 2e10;

// "<GPU name>, <GiB> GiB, CUDA driver <x.y>, runtime <x.y>; host <describe_machine()>".
std::string describe_cuda_device(int device) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int driver = 0, runtime = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  const auto version = [](int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); };
  return fmt::format("{}, {:.1f} GiB, CUDA driver {}, runtime {}; host {}", prop.name,
                     static_cast<double>(prop.totalGlobalMem) / units::kGiB, version(driver),
                     version(runtime), describe_machine());
}

}  // namespace

Profile calibrate_cuda_compute(const ComputeCalibrationOptions& options,
                               const Progress& progress) {
  check_cuda_shapes(options);
  const ModelSpec& largest = elementwise_model(options);
  const std::vector<std::pair<std::string, LinearShape>> layers = calibration_layers(options);
  if (!kernels::cuda::cuda_device_available()) {
    throw ConfigError("calibrate --backend cuda: no CUDA device: " +
                      kernels::cuda::cuda_unavailable_reason());
  }
  return cuda::as_system_error([&] {
    constexpr int kDevice = 0;
    CUDA_CHECK(cudaSetDevice(kDevice));
    CUDA_CHECK(cudaFree(nullptr));  // creates the context
    const std::int64_t at_context = device_bytes_in_use();
    ComputeMeasurements measured;
    DeviceHeadroom headroom;
    CudaComputeBench bench;
    const std::int64_t at_handle = device_bytes_in_use();
    std::vector<CalibrationStep> steps;
    for (const auto& named : layers) {
      const LinearShape layer = named.second;
      for (GemmPass pass : calibration_passes(options)) {
        const double flops = 2.0 * layer.BT * layer.C * layer.OC;
        steps.push_back({fmt::format("gemm {} {} {} ({}x{}x{})", named.first, layer.name,
                                     to_string(pass), layer.BT, layer.C, layer.OC),
                         expected_s(flops / kGuessFlopsPerS, options.timing),
                         [&measured, &bench, layer, pass, &options] {
                           measured.gemms.push_back(
                               bench.measure_linear(layer, pass, options.timing));
                         }});
      }
    }
    const std::int64_t BT = options.micro_batch * largest.seq_len;
    const std::int64_t C = largest.hidden / options.tp, NH = largest.heads / options.tp;
    const double layer_bytes = 2.0 * BT * largest.hidden * 2;
    steps.push_back({fmt::format("elementwise ({}x{})", BT, largest.hidden),
                     expected_s(3 * layer_bytes / kGuessBytesPerS, options.timing), [&] {
                       measured.layer_elementwise_s =
                           bench.layer_elementwise_s(BT, largest.hidden, options.timing);
                     }});
    steps.push_back({fmt::format("elementwise backward ({}x{})", BT, largest.hidden),
                     expected_s(4 * layer_bytes / kGuessBytesPerS, options.timing), [&] {
                       measured.layer_elementwise_backward_s =
                           bench.layer_elementwise_backward_s(BT, largest.hidden, options.timing);
                     }});
    const double attention_flops = attention_causal_flops(options.micro_batch, largest.seq_len, C, NH);
    steps.push_back({fmt::format("attention (T={}, heads={})", largest.seq_len, NH),
                     expected_s(attention_flops / kGuessFlopsPerS, options.timing), [&] {
                       measured.attention_s = bench.attention_s(options.micro_batch,
                                                                largest.seq_len, C, NH,
                                                                options.timing);
                     }});
    steps.push_back({fmt::format("attention backward (T={}, heads={})", largest.seq_len, NH),
                     expected_s(2 * attention_flops / kGuessFlopsPerS, options.timing), [&] {
                       measured.attention_backward_s = bench.attention_backward_s(
                           options.micro_batch, largest.seq_len, C, NH, options.timing);
                     }});
    const ModelSpec llama = llama_ops_model(options);
    const LlamaOpShape llama_shape = llama_op_shape(llama, options.micro_batch, options.tp, true);
    steps.push_back({fmt::format("llama operators ({}: RMSNorm, SwiGLU, rotary, attention at "
                                 "head sizes {})", llama.name,
                                 fmt::join(llama_shape.attention_head_sizes, ", ")),
                     12 * expected_s(2 * layer_bytes / kGuessBytesPerS, options.timing), [&] {
                       measured.llama =
                           measure_cuda_llama_ops(llama_shape, bench.stream(), options.timing);
                     }});
    steps.push_back({fmt::format("device adamw ({} params)", options.adam_params),
                     expected_s(30.0 * options.adam_params / kGuessBytesPerS, options.timing), [&] {
                       measured.device_adam_params_per_s =
                           bench.adamw_params_per_s(options.adam_params, options.timing);
                     }});
    steps.push_back({fmt::format("host memory and cpu adamw ({} MiB, {} threads)",
                                 options.memory_working_set_bytes >> 20, options.adam_threads),
                     expected_s(7.0 * options.memory_working_set_bytes / 1e10, options.timing),
                     [&] {
                       const HostMemoryRates rates = measure_cpu_host_memory(options);
                       measured.cpu_adam_params_per_s = rates.adam_params_per_s;
                       measured.host_memory_bytes_per_s = rates.bandwidth.best();
                       measured.memory_working_set_bytes = options.memory_working_set_bytes;
                       measured.last_level_cache_bytes = options.last_level_cache_bytes;
                     }});
    steps.push_back({fmt::format("pinned copies each way ({} MiB)", options.copy_bytes >> 20),
                     2 * expected_s(options.copy_bytes / kGuessCopyBytesPerS, options.timing), [&] {
                       measured.host_to_device_bytes_per_s =
                           bench.host_to_device_bytes_per_s(options.copy_bytes, options.timing);
                       measured.device_to_host_bytes_per_s =
                           bench.device_to_host_bytes_per_s(options.copy_bytes, options.timing);
                     }});
    steps.push_back({"device memory headroom (context, cuBLASLt, NCCL)", 0.05, [&] {
      // Every benchmark's buffers are freed by now: what is in use is the context with the
      // modules the kernels loaded (lazily, at their first launch), and cuBLASLt's handle
      // with its workspace and scratch, which the memory model budgets apart
      // (memory_model.cc, kCudaWorkspaceBytes): the headroom's context is the rest.
      const auto workspace = static_cast<std::int64_t>(
          bench.cublas_lt().workspace_bytes() +
          bench.cublas_lt().reduction_scratch_floats() * sizeof(float));
      const std::int64_t after = device_bytes_in_use();
      headroom.context_bytes = static_cast<double>(after - workspace);
      // The communicator is measured last and is optional: its failure (NCCL cannot start
      // here) is recorded, not fatal to the rates measured so far.
      std::string communicator;
      try {
        const std::int64_t bytes = nccl_communicator_bytes(bench.stream());
        headroom.communicator_bytes = static_cast<double>(std::max<std::int64_t>(bytes, 0));
        communicator = bytes >= 0 ? fmt::format("{:.0f} MiB for a one-rank NCCL communicator "
                                                "after one all-reduce",
                                                static_cast<double>(bytes) / units::kMiB)
                                  : "not measured (built without NCCL)";
      } catch (const kernels::cuda::CudaError& e) {
        communicator = fmt::format("not measured ({})", e.what());
      }
      cudaDeviceProp prop{};
      CUDA_CHECK(cudaGetDeviceProperties(&prop, kDevice));
      const auto mib = [](std::int64_t b) { return static_cast<double>(b) / units::kMiB; };
      headroom.source = fmt::format(
          "measured by strata calibrate --backend cuda on {}: {:.0f} MiB in use at context "
          "creation, {:.0f} MiB more with the cuBLASLt handle (of which its {:.0f} MiB of "
          "workspace and scratch are budgeted apart and not counted), {:.0f} MiB more after "
          "the kernels ran; "
          "communicator: {}; fragmentation not measured (no caching allocator)",
          prop.name, mib(at_context), mib(at_handle - at_context), mib(workspace),
          mib(after - at_handle), communicator);
    }});
    run_steps(steps, progress);

    MeasuredAt at;
    at.model = largest;
    at.llama_model = llama;
    at.micro_batch = options.micro_batch;
    at.tp = options.tp;
    at.kernels = layer_kernels(executor_conventions(Backend::kCuda));
    at.element_bytes = 2.0;  // bf16 activations
    Profile profile = compute_profile(measured, at);
    profile.backend = "cuda";
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    // With one GPU there is nothing to measure collectives over; with several, the NCCL
    // collectives are not calibrated yet: the profile says which.
    profile.machine = fmt::format(
        "{}; {} GPU(s): {}", describe_cuda_device(kDevice), devices,
        devices > 1 ? "collectives not measured yet" : "one GPU, no collectives to measure");
    profile.headroom = headroom;
    return profile;
  });
}

}  // namespace strata::calibrate
