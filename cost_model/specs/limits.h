// Upper bounds on the magnitudes a config may give, checked at load (each spec's from_json)
// and by the CLI's flags. They are far beyond any model, cluster or run built so far, and
// small enough that every product the cost model and the executor form stays inside int64 and
// finite in double. Without them a hidden of 2^62 crashed `run`, a memory of 1e308 GiB became a
// budget of -2^63 bytes, and nodes x gpus_per_node overflowed to 0 GPUs.
//
// The products they protect (worst case with every bound at once):
// - parameters: layers * (4 h^2 + 2 h f + ...) <= 2^11 * (2^38 + 2^41) < 2^53;
//   vocab * hidden <= 2^24 * 2^18 = 2^42;
// - attention scores per micro-batch: heads * seq^2 * micro_batch <= 2^12 * 2^34 * 2^14 =
//   2^60 elements, and activations seq * micro_batch * ffn <= 2^17 * 2^14 * 2^20 = 2^51;
// - ranks: tp * pp * dp <= 2^48 and nodes * gpus_per_node <= 2^26;
// - memory: 2^20 GiB = 2^50 bytes per device, 2^24 GiB per host, 1e9 GB of NVMe, all well
//   inside int64 bytes;
// - rates are bounded below as well, so that bytes / rate and flops / rate stay finite.
// Deliberately not here: rules between fields (a plan against a model: plan.h).
#pragma once

#include <cstdint>

namespace strata::limits {

// ModelSpec (the largest published GPT: 128 layers, hidden 25600, 128K context, 256K vocab).
// Layers and the global batch are also bounded by the planner's time: every candidate's
// Program is made and its memory walked, O(layers + micro-batches) per pipeline rank (a
// repeated pass is applied as its recorded sums: program_memory.h). On a 2-core machine the
// tiny model at a global batch of 16384 plans for 8 devices in ~6 s; 2048 layers at 16384 in
// ~2.5 min, the slowest corner these bounds allow.
inline constexpr std::int64_t kLayers = std::int64_t{1} << 11;
inline constexpr std::int64_t kHidden = std::int64_t{1} << 18;
inline constexpr std::int64_t kFfnHidden = std::int64_t{1} << 20;
inline constexpr std::int64_t kHeads = std::int64_t{1} << 12;
inline constexpr std::int64_t kSeqLen = std::int64_t{1} << 17;
inline constexpr std::int64_t kVocab = std::int64_t{1} << 24;

// TrainSpec and the run flags (GPT-3 and Megatron-1T use a global batch of 1536 and 3072).
inline constexpr std::int64_t kGlobalBatch = std::int64_t{1} << 14;
inline constexpr std::int64_t kSteps = 1'000'000'000;
inline constexpr double kLearningRate = 1e3;
inline constexpr double kGradClip = 1e12;

// Plan: each degree and the micro-batch.
inline constexpr std::int64_t kDegree = std::int64_t{1} << 16;

// ClusterSpec, in the JSON's units.
inline constexpr std::int64_t kNodes = std::int64_t{1} << 16;
inline constexpr std::int64_t kGpusPerNode = std::int64_t{1} << 10;
inline constexpr std::int64_t kCpuCores = std::int64_t{1} << 16;
inline constexpr double kDeviceMemoryGib = 1 << 20;
inline constexpr double kHostMemoryGib = 1 << 24;
inline constexpr double kNvmeCapacityGb = 1e9;
inline constexpr double kTflops = 1e6;            // a device's peak, TFLOP/s
inline constexpr double kCpuGflops = 1e9;         // a node's CPU, GFLOP/s
inline constexpr double kBandwidthGbPerS = 1e6;   // any link or memory, GB/s
inline constexpr double kLatencyUs = 1e9;         // 1000 s
// The least rate a cluster may give: 1 byte/s, 1000 FLOP/s. Lower, and bytes / rate overflows.
inline constexpr double kMinBandwidthGbPerS = 1e-9;
inline constexpr double kMinTflops = 1e-9;

// Profile, in SI units.
inline constexpr double kRatePerS = 1e18;         // any measured rate (bytes/s, FLOP/s, params/s)
inline constexpr double kMinRatePerS = 1;         // a measured rate is 0 (absent) or at least this
inline constexpr double kSeconds = 1e6;           // latencies, overheads
inline constexpr double kScale = 1e6;             // fed-back factors
inline constexpr std::int64_t kGemmDim = std::int64_t{1} << 24;
inline constexpr std::int64_t kRanks = std::int64_t{1} << 26;
inline constexpr std::int64_t kProfileBytes = std::int64_t{1} << 50;  // sizes timed at: 1 PiB

// Flags of `strata run` and `strata select`.
inline constexpr double kBudgetMib = double{1 << 30};   // 1 PiB
inline constexpr std::int64_t kPrefetchDepth = 1024;
inline constexpr double kCommTimeoutS = 7 * 24 * 3600.0;  // a week

}  // namespace strata::limits
