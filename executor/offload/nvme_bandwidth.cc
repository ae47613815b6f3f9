// measure_nvme_bandwidth: timed sequential write then read through the NVMe tier's I/O path
// (see nvme_bandwidth.h).
#include "executor/offload/nvme_bandwidth.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "cost_model/specs/errors.h"
#include "executor/offload/aligned_buffer.h"
#include "executor/offload/nvme_store.h"

namespace strata::offload {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

NvmeBandwidth measure_nvme_bandwidth(const std::filesystem::path& dir, std::int64_t file_bytes,
                                     std::int64_t block_bytes, int queue_depth) {
  if (block_bytes <= 0 || !is_aligned(block_bytes)) {
    throw ConfigError(fmt::format("nvme bandwidth: block_bytes = {}; expected a positive "
                                  "multiple of {}", block_bytes, kDirectIoAlignment));
  }
  if (file_bytes <= 0 || file_bytes % block_bytes != 0) {
    throw ConfigError(fmt::format("nvme bandwidth: file_bytes = {}; expected a positive "
                                  "multiple of block_bytes = {}", file_bytes, block_bytes));
  }
  NvmeStoreOptions options;
  options.dir = dir;
  options.io = IoOptions{block_bytes, queue_depth};
  options.bounce_bytes = kDirectIoAlignment;  // unused here: keep it small
  NvmeStore store(options);  // run directory, crash cleanup, removal at the end

  // The file itself is ours (not a store tensor): the store would zero-fill it first.
  UringFile file(store.run_dir() / "bandwidth.bin", Create::kNew, OpenMode::kDirectOrBuffered);
  file.allocate(file_bytes);
  IoEngine& io = store.engine();

  // One window of queue_depth blocks, filled with a non-zero pattern, written repeatedly.
  const std::int64_t window = std::min<std::int64_t>(file_bytes, block_bytes * queue_depth);
  AlignedBuffer buffer(window);
  for (std::int64_t i = 0; i < window; ++i) {
    buffer.bytes_ptr()[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
  }

  NvmeBandwidth result;
  result.direct = file.direct();
  result.file_bytes = file_bytes;
  result.block_bytes = block_bytes;
  result.queue_depth = queue_depth;

  // Each window is one ticket of queue_depth blocks; keeping two tickets open at a time
  // keeps queue_depth blocks in flight continuously (the engine queues the overflow).
  auto pass = [&](bool write) {
    const auto start = std::chrono::steady_clock::now();
    IoEngine::Ticket previous = 0;
    for (std::int64_t off = 0; off < file_bytes; off += window) {
      const std::int64_t len = std::min(window, file_bytes - off);
      const IoEngine::Ticket ticket = write ? io.start_write(file, buffer.data(), len, off)
                                            : io.start_read(file, buffer.data(), len, off);
      if (previous != 0) io.wait(previous);
      previous = ticket;
    }
    io.wait_all();
    return seconds_since(start);
  };
  const double write_s = pass(true);
  const double read_s = pass(false);
  result.write_bytes_per_s = static_cast<double>(file_bytes) / write_s;
  result.read_bytes_per_s = static_cast<double>(file_bytes) / read_s;
  file.close();
  return result;
}

}  // namespace strata::offload
