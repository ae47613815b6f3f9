// measure_nvme_bandwidth: the sequential write and read bandwidth of the NVMe tier's own I/O
// path (UringFile + IoEngine: O_DIRECT, io_uring, block_bytes per submission, queue_depth
// in flight) on one file of file_bytes in a fresh run directory under dir. `strata
// calibrate --nvme-dir` records it in the Profile; tools/nvme_vs_fio.sh compares it with
// fio at the same parameters.
//
// Method, matched to fio --rw=write/read --direct=1 --ioengine=io_uring: the file is
// preallocated (fio's default fallocate), written once front to back from a buffer of
// queue_depth blocks, then read back front to back; each pass is timed from the first
// submission to the last completion. No fsync (fio's default end_fsync=0; O_DIRECT writes
// have reached the device when they complete). The file is removed afterwards.
// Deliberately not here: random I/O, multiple jobs, cache dropping (O_DIRECT bypasses it).
#pragma once

#include <cstdint>
#include <filesystem>

namespace strata::offload {

struct NvmeBandwidth {
  double write_bytes_per_s = 0.0;
  double read_bytes_per_s = 0.0;
  bool direct = true;  // false: the filesystem refused O_DIRECT and buffered I/O was timed
  std::int64_t file_bytes = 0;
  std::int64_t block_bytes = 0;
  int queue_depth = 0;
};

// file_bytes: a positive multiple of block_bytes; block_bytes a multiple of 4096. Throws
// ConfigError for bad sizes and SystemError for a failed system or io_uring call.
NvmeBandwidth measure_nvme_bandwidth(const std::filesystem::path& dir, std::int64_t file_bytes,
                                     std::int64_t block_bytes, int queue_depth);

}  // namespace strata::offload
