// The size of this machine's last-level cache, and the working set a memory-bound benchmark
// must exceed so that it times DRAM rather than cache: a rate measured on arrays that fit
// the cache (issue 38: CPU AdamW timed at ~200 GB/s of traffic on a VM whose DRAM gives
// ~20) prices every offload plan several times too fast.
// Deliberately not here: the benchmarks (compute_bench.h, tools/bench/cpu_adam_bench.cc).
#pragma once

#include <cstdint>
#include <string>

namespace strata::calibrate {

struct LastLevelCache {
  std::int64_t bytes = 0;
  std::string source;  // where the size came from, for reports
};

// The largest data or unified cache cpu0 reports in sysfs (/sys/devices/system/cpu/cpu0/
// cache/index*/), else glibc's sysconf (_SC_LEVEL3_CACHE_SIZE, then _SC_LEVEL2_CACHE_SIZE:
// CPUID), else kFallbackCacheBytes (a VM that hides both). On a VM the figure may be the
// whole socket's (a 2-core EPYC VM reports 508 MiB), which only makes benchmarks sized from
// it larger than they need be.
LastLevelCache last_level_cache();

inline constexpr std::int64_t kFallbackCacheBytes = std::int64_t{256} << 20;

// How many times the last-level cache an out-of-cache working set spans: STREAM's rule.
inline constexpr std::int64_t kOutOfCacheFactor = 4;

// kOutOfCacheFactor times last_level_cache().bytes.
std::int64_t out_of_cache_bytes();

}  // namespace strata::calibrate
