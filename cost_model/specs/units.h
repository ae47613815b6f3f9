// Unit constants. Config keys carry their unit (memory_gib, bandwidth_gb_per_s, latency_us)
// and are converted once, at load, into SI fields ending in _bytes, _s, _flops,
// _bytes_per_s. Formulas never multiply by a bare 1e12.
#pragma once

namespace strata::units {

inline constexpr double kB = 1.0;
inline constexpr double kKB = 1e3;
inline constexpr double kMB = 1e6;
inline constexpr double kGB = 1e9;  // GB = 1e9 bytes
inline constexpr double kTB = 1e12;
inline constexpr double kKiB = 1024.0;
inline constexpr double kMiB = 1024.0 * 1024.0;
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // GiB = 2^30 bytes
inline constexpr double kGiga = 1e9;
inline constexpr double kTera = 1e12;
inline constexpr double kMicrosecond = 1e-6;
inline constexpr double kMillisecond = 1e-3;

}  // namespace strata::units
