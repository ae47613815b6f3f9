// strata_cpu_adam_bench: the CPU AdamW step (kernels/cpu/adamw.h, all cores, fp32 master and
// moments; again with the bf16 copy of the parameters written in the same pass) on arrays
// out of the last-level cache, beside this machine's memory bandwidth measured in the same
// program on the same arrays, the repeats of each alternated (executor/calibrate/
// memory_bench.h, which `strata calibrate` runs too: it says which bandwidth kernels and why
// the best of them). Prints key=value lines: AdamW the median of --reps, each bandwidth its
// fastest repeat (as STREAM reports);
// tools/bench/cpu_adam_vs_pytorch.py sets them beside PyTorch's CPU AdamW on the same array
// sizes. AdamW moves 28 bytes a parameter (30 with the bf16 copy).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <omp.h>

#include <exception>
#include <fstream>
#include <iostream>
#include <string>

#include "cost_model/specs/profile.h"
#include "executor/calibrate/last_level_cache.h"
#include "executor/calibrate/memory_bench.h"
#include "kernels/cpu/kernel_path.h"

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU AdamW on out-of-cache arrays beside the machine's memory bandwidth"};
  std::int64_t working_set = 0;
  int reps = 7;
  app.add_option("--working-set-bytes", working_set,
                 "bytes of AdamW's four arrays (16 a parameter); default 4x the last-level "
                 "cache")
      ->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "repetitions (AdamW: the median; bandwidth: the fastest)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  try {
    namespace cal = strata::calibrate;
    const cal::LastLevelCache llc = cal::last_level_cache();
    if (working_set == 0) working_set = cal::kOutOfCacheFactor * llc.bytes;
    cal::HostArrays arrays(working_set);
    const cal::HostMemoryRates r =
        cal::measure_host_memory(arrays, cal::TimingOptions{reps, 0.0}, /*with_bf16_copy=*/true);
    const double n = static_cast<double>(arrays.size());
    const double memory = r.bandwidth.best();
    const double adam_bytes = strata::kCpuAdamBytesPerParam * r.adam_params_per_s;
    const double adam_bf16_bytes = (strata::kCpuAdamBytesPerParam + 2) * r.adam_bf16_params_per_s;
    std::cout << fmt::format("cpu={}\nthreads={}\nkernel_path={}\n", cpu_model(),
                             omp_get_max_threads(),
                             strata::kernels::cpu::active_kernel_path().name())
              << fmt::format("llc_bytes={}\nllc_source={}\nworking_set_bytes={}\nparams={}\n",
                             llc.bytes, llc.source, arrays.working_set_bytes(), arrays.size())
              << fmt::format("reps={}\nstream_copy_bytes_per_s={:.4g}\n"
                             "stream_triad_bytes_per_s={:.4g}\nin_place_bytes_per_s={:.4g}\n"
                             "adamw_streams_bytes_per_s={:.4g}\nmemory_bytes_per_s={:.4g}\n",
                             reps, r.bandwidth.copy_bytes_per_s, r.bandwidth.triad_bytes_per_s,
                             r.bandwidth.in_place_bytes_per_s,
                             r.bandwidth.adamw_streams_bytes_per_s, memory)
              << fmt::format("adamw_s={:.6f}\nadamw_params_per_s={:.4g}\n"
                             "adamw_bytes_per_s={:.4g}\nadamw_fraction_of_memory_bw={:.3f}\n",
                             n / r.adam_params_per_s, r.adam_params_per_s, adam_bytes,
                             adam_bytes / memory)
              << fmt::format("adamw_bf16_s={:.6f}\nadamw_bf16_params_per_s={:.4g}\n"
                             "adamw_bf16_bytes_per_s={:.4g}\n"
                             "adamw_bf16_fraction_of_memory_bw={:.3f}\n",
                             n / r.adam_bf16_params_per_s, r.adam_bf16_params_per_s,
                             adam_bf16_bytes, adam_bf16_bytes / memory);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "strata_cpu_adam_bench: " << e.what() << "\n";
    return 2;
  }
}
