// strata_nvme_bench: sequential write then read bandwidth of the NVMe tier's own I/O path
// (executor/offload: O_DIRECT, io_uring, block size and queue depth as given) on one file
// in --nvme-dir. Prints one key=value line per figure so tools/nvme_vs_fio.sh can set it
// beside fio at the same parameters. With --adam-mib it also times one streamed CPU AdamW
// step (cpu_adam_stream.h) over param, m and v all on NVMe, beside the same step in memory,
// to show how much of the I/O the compute hides. Deliberately no fio here: the script runs
// both.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <exception>
#include <iostream>
#include <string>

#include <chrono>
#include <vector>

#include "executor/offload/cpu_adam_stream.h"
#include "executor/offload/nvme_bandwidth.h"
#include "kernels/cpu/adamw.h"

namespace {

double seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Step 1 warms up (page faults, thread start); step 2 is timed.
void time_adam(const std::string& dir, std::int64_t mib, std::int64_t tile_floats,
               const strata::offload::IoOptions& io) {
  using namespace strata::offload;
  const std::int64_t n = (mib << 20) / 4;
  std::vector<float> p(n, 0.5f), m(n, 0.0f), v(n, 0.0f), g(n, 0.01f);
  const strata::kernels::cpu::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  strata::kernels::cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp, 1);
  auto start = std::chrono::steady_clock::now();
  strata::kernels::cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp, 2);
  const double memory_s = seconds(start);

  NvmeStoreOptions options;
  options.dir = dir;
  options.io = io;
  NvmeStore store(options);
  store.create_from("p", p.data(), n);
  store.create_from("m", m.data(), n);
  store.create_from("v", v.data(), n);
  CpuAdamStream stream(AdamState{n, StateArray::in_nvme("p"), StateArray::in_nvme("m"),
                                 StateArray::in_nvme("v")}, tile_floats, &store);
  stream.step(g.data(), hp, 1);
  start = std::chrono::steady_clock::now();
  const StreamIo moved = stream.step(g.data(), hp, 2);
  const double nvme_s = seconds(start);
  std::cout << fmt::format("adam_state_bytes={}\nadam_staging_bytes={}\n", 3 * n * 4,
                           stream.staging_bytes())
            << fmt::format("adam_in_memory_step_s={:.4f}\nadam_nvme_step_s={:.4f}\n", memory_s,
                           nvme_s)
            << fmt::format("adam_nvme_moved_bytes={}\nadam_nvme_io_bytes_per_s={:.0f}\n",
                           moved.read_bytes + moved.written_bytes,
                           static_cast<double>(moved.read_bytes + moved.written_bytes) / nvme_s);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strata_nvme_bench: the NVMe tier's sequential O_DIRECT io_uring bandwidth"};
  std::string dir = "/tmp/strata-nvme";
  std::int64_t file_mib = 1024;
  std::int64_t block_kib = 1024;
  int queue_depth = 16;
  std::int64_t adam_mib = 0;
  std::int64_t tile_kib = 8192;
  app.add_option("--nvme-dir", dir, "directory on the NVMe filesystem")->capture_default_str();
  app.add_option("--file-mib", file_mib, "file size in MiB")->capture_default_str();
  app.add_option("--block-kib", block_kib, "bytes per submission in KiB")->capture_default_str();
  app.add_option("--queue-depth", queue_depth, "submissions in flight")->capture_default_str();
  app.add_option("--adam-mib", adam_mib, "also time a streamed AdamW step over 3 arrays of "
                 "this many MiB on NVMe (0: skip)")->capture_default_str();
  app.add_option("--tile-kib", tile_kib, "AdamW tile per array in KiB")->capture_default_str();
  try {
    app.parse(argc, argv);
    const auto bw = strata::offload::measure_nvme_bandwidth(dir, file_mib << 20, block_kib << 10,
                                                            queue_depth);
    std::cout << fmt::format("mode={}\n", bw.direct ? "O_DIRECT" : "buffered(O_DIRECT refused)")
              << fmt::format("file_bytes={}\nblock_bytes={}\nqueue_depth={}\n", bw.file_bytes,
                             bw.block_bytes, bw.queue_depth)
              << fmt::format("write_bytes_per_s={:.0f}\nread_bytes_per_s={:.0f}\n",
                             bw.write_bytes_per_s, bw.read_bytes_per_s);
    if (adam_mib > 0) {
      time_adam(dir, adam_mib, (tile_kib << 10) / 4,
                strata::offload::IoOptions{block_kib << 10, queue_depth});
    }
    return 0;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "strata_nvme_bench: " << e.what() << "\n";
    return 2;
  }
}
