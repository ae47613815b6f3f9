// The last-level cache's size from sysfs or CPUID (see last_level_cache.h).
#include "executor/calibrate/last_level_cache.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace strata::calibrate {
namespace {

// A sysfs cache size ("32768K", "1M", "512") in bytes; 0 when unreadable.
std::int64_t parse_size(const std::string& text) {
  std::size_t used = 0;
  std::int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    return 0;
  }
  const char unit = used < text.size() ? text[used] : ' ';
  if (unit == 'K') return value << 10;
  if (unit == 'M') return value << 20;
  if (unit == 'G') return value << 30;
  return value;
}

std::string read_line(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

LastLevelCache last_level_cache() {
  const std::filesystem::path dir = "/sys/devices/system/cpu/cpu0/cache";
  LastLevelCache best;
  int best_level = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind("index", 0) != 0) continue;
    const std::string type = read_line(entry.path() / "type");
    if (type != "Data" && type != "Unified") continue;
    const int level = std::atoi(read_line(entry.path() / "level").c_str());
    const std::int64_t bytes = parse_size(read_line(entry.path() / "size"));
    if (bytes > 0 && level > best_level) {
      best_level = level;
      best = {bytes, "sysfs L" + std::to_string(level)};
    }
  }
  if (best.bytes > 0) return best;
  for (const auto& [name, source] : {std::pair{_SC_LEVEL3_CACHE_SIZE, "sysconf L3 (CPUID)"},
                                     std::pair{_SC_LEVEL2_CACHE_SIZE, "sysconf L2 (CPUID)"}}) {
    if (const long bytes = sysconf(name); bytes > 0) return {bytes, source};
  }
  return {kFallbackCacheBytes, "none reported: 256 MiB assumed"};
}

std::int64_t out_of_cache_bytes() { return kOutOfCacheFactor * last_level_cache().bytes; }

}  // namespace strata::calibrate
