// The single-process part of `strata calibrate` for the CPU backend: which microbenchmarks
// run (the GEMMs of the given models' linear layers, forward and backward; the memory-bound
// kernels; attention; AdamW; copies) and how their results fill a Profile. Reports progress
// through a callback (the library never prints). Also what every backend's calibration shares:
// the layers and passes to time, the model the elementwise and attention kernels run at, and
// the step runner (the CUDA twin, cuda_calibration.h, uses them; both turn their timings
// into a Profile through compute_profile.h).
//
// CPU-backend meaning of the Profile's fields: the "device" is one rank, so the kernels
// (GEMMs, elementwise, attention, device_adam_params_per_s) are timed at the thread count a
// rank of the runs this profile is for gets (kernel_threads: `strata run` gives each of N
// ranks max(1, cores / N) threads); cpu_adam_params_per_s is the whole machine's AdamW rate
// (adam_threads = every core), which the time model shares among the ranks of a node.
// Host<->device copies are DRAM memcpy (one measurement for both directions).
// Why per-rank threads matter: with 2 OpenMP + 2 OpenBLAS threads on 2 cores, the spinning
// BLAS threads hold the cores an OpenMP region needs, and a 64x64x64 matmul_forward measured
// ~0.2 GFLOP/s against ~60 GFLOP/s at one thread (2-core dev machine).
//
// Deliberately not here: collectives (collective_bench.h, run under mpirun by the CLI),
// NVMe (executor/offload's measurement, called by the CLI when --nvme-dir is given),
// what measured runs fold in (`strata run --update-profile`, cost_model/pricing/profile_feedback.h),
// writing the file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/profile.h"
#include "executor/calibrate/compute_bench.h"
#include "executor/calibrate/memory_bench.h"
#include "executor/calibrate/timing.h"

namespace strata::calibrate {

struct ComputeCalibrationOptions {
  std::vector<ModelSpec> models;  // GEMM shapes of each one's linear layers (non-empty)
  std::int64_t micro_batch = 1;   // BT = micro_batch * seq_len (attention, elementwise)
  std::int64_t tp = 1;            // tensor-parallel split of the layers' shapes
  // GEMM shapes at every (micro-batch, tp) pair of these lists (empty: {micro_batch} and
  // {tp}), so that the plans the profile is for are priced at measured shapes rather than
  // interpolated ones; a tp that does not divide a model's heads, ffn or vocab is skipped
  // for that model.
  std::vector<std::int64_t> gemm_micro_batches;
  std::vector<std::int64_t> gemm_tps;
  bool backward = true;           // also the two backward GEMMs of each layer
  TimingOptions timing;
  TimingOptions large_timing;     // for GEMMs over kLargeGemmFlops (fewer repeats)
  // The host-memory rates (its bandwidth, CPU AdamW, the CPU backend's copies) are timed on
  // one set of arrays of this many bytes (memory_bench.h), at least kOutOfCacheFactor x the
  // last-level cache in a full calibration; the CUDA backend's device AdamW runs on
  // adam_params = memory_working_set_bytes / 16 parameters and its pinned copies move
  // copy_bytes = memory_working_set_bytes / 4 each way.
  std::int64_t memory_working_set_bytes = std::int64_t{1} << 26;
  std::int64_t last_level_cache_bytes = 0;  // recorded in the profile
  std::int64_t adam_params = std::int64_t{1} << 22;
  std::int64_t copy_bytes = std::int64_t{1} << 24;
  int kernel_threads = 0;  // OpenMP and OpenBLAS threads for the kernels (0: leave as set)
  int adam_threads = 0;    // threads for cpu_adam_params_per_s (0: leave as set)
  int busy_cores = 0;      // cores for busy_cores_slowdown (< 2: not measured)
};

// A GEMM of more FLOPs than this (the GPT-2 logits: 2 x 1024 x 768 x 50257 = 79 GFLOP)
// takes a second or more on two cores; it gets large_timing.
inline constexpr double kLargeGemmFlops = 1e10;

// Defaults for a full run (5 repeats; host memory out of cache: kOutOfCacheFactor x the
// last-level cache) or a quick one (3 repeats of >= 5 ms, forward GEMMs only, host memory
// on at most kQuickMemoryBytes: first-touching 4x a 512 MiB cache took ~20 s on the 2-core
// VM, and quick runs are CI's; the profile records the size, so a quick AdamW rate from a
// larger cache is known for what it is).
inline constexpr std::int64_t kQuickMemoryBytes = std::int64_t{64} << 20;
ComputeCalibrationOptions compute_options(std::vector<ModelSpec> models, bool quick);

// Sets memory_working_set_bytes and the sizes derived from it (adam_params, copy_bytes).
void set_memory_working_set(ComputeCalibrationOptions& options, std::int64_t bytes);

// fraction in [0, 1] of the work done, and the step about to run (or "done").
using Progress = std::function<void(double fraction, const std::string& step)>;

// The model the attention and elementwise benchmarks run at: the one with the largest
// micro_batch * seq_len * hidden. ConfigError when models is empty.
const ModelSpec& elementwise_model(const ComputeCalibrationOptions& options);

// The model Llama's operators (llama_op_bench.h) run at: the largest (as above) of the
// models that make any of Llama's choices (RMSNorm, SwiGLU, rotary positions, grouped-query
// attention), else a Llama layer of elementwise_model's sizes (RMSNorm, SwiGLU, rotary
// positions with Llama 3's theta, the query heads in the smallest groups of two or more that
// share a KV head under options.tp, no biases), so that every calibration prices a Llama
// model with its own operators' rates.
// ConfigError when models is empty.
ModelSpec llama_ops_model(const ComputeCalibrationOptions& options);

// The linear layers whose GEMMs a calibration times, as (model name, layer): every model's
// at every (micro-batch, tp) of gemm_micro_batches x gemm_tps (see the options), each
// distinct shape-and-epilogue once (gemm_samples merges passes by shape anyway). ConfigError
// when options.tp does not divide a model (the gemm_tps that do not are skipped).
std::vector<std::pair<std::string, LinearShape>> calibration_layers(
    const ComputeCalibrationOptions& options);

// The passes timed per layer: forward, and both backward GEMMs when options.backward.
std::vector<GemmPass> calibration_passes(const ComputeCalibrationOptions& options);

// One benchmark of a calibration: a name for the progress line, its expected seconds (so
// that the bar moves with the time spent, roughly) and what it runs.
struct CalibrationStep {
  std::string name;
  double weight = 0;
  std::function<void()> run;
};

// Runs the steps in order, reporting progress(done weight / total, next step's name) before
// each and progress(1, "done") after the last.
void run_steps(const std::vector<CalibrationStep>& steps, const Progress& progress);

// Seconds a step takes under median_call_seconds (or its CUDA twin): one warm-up call, then
// repeats of at least min_repeat_s each; for the steps' weights.
double expected_s(double call_s, const TimingOptions& timing);

// Runs the benchmarks (thread counts set for each and restored afterwards) and returns a
// Profile with machine = describe_machine(), backend "cpu", threads_per_rank =
// kernel_threads (1 when 0: the kernels ran at whatever was set), and the compute fields
// compute_profile (compute_profile.h) makes of the CPU kernels' timings: gemm samples,
// elementwise and attention rates (forward, and backward when options.backward), Llama's
// operators' rates (llama_op_bench.h, at llama_ops_model; backward when options.backward),
// copy and AdamW rates; collectives empty and NVMe 0 (not measured here). Attention and
// elementwise run at the shapes of elementwise_model. ConfigError when models is empty or a
// shape is invalid (options.tp not dividing).
Profile calibrate_compute(const ComputeCalibrationOptions& options, const Progress& progress);

// The host's memory bandwidth and CPU AdamW rate (measure_host_memory) on arrays of
// options.memory_working_set_bytes at options.adam_threads OpenMP/BLAS threads (0: as
// set), restored afterwards: a GPU calibration's cpu_adam_params_per_s (the offloaded
// optimizer's rate) and host_memory_bytes_per_s.
HostMemoryRates measure_cpu_host_memory(const ComputeCalibrationOptions& options);

// "<hostname>: <CPU model name>, <n> hardware threads" (from gethostname and
// /proc/cpuinfo; "unknown" for what cannot be read).
std::string describe_machine();

}  // namespace strata::calibrate
