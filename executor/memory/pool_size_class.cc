// The device pool's size classes (see pool_size_class.h).
#include "executor/memory/pool_size_class.h"

#include <fmt/format.h>

#include <stdexcept>

namespace strata {

std::int64_t pool_size_class(std::int64_t bytes) {
  if (bytes < 1) {
    throw std::invalid_argument(fmt::format("pool_size_class: {} bytes (expected >= 1)", bytes));
  }
  if (bytes <= kPoolSmallLimitBytes) {
    std::int64_t c = kPoolMinBlockBytes;
    while (c < bytes) c *= 2;  // at most 11 doublings: 512 B .. 1 MiB
    return c;
  }
  return (bytes + kPoolLargeGranuleBytes - 1) / kPoolLargeGranuleBytes * kPoolLargeGranuleBytes;
}

}  // namespace strata
