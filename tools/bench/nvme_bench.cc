// strata_nvme_bench: sequential write then read bandwidth of the NVMe tier's own I/O path
// (executor/offload: O_DIRECT, io_uring, block size and queue depth as given) on one file
// in --nvme-dir. Prints one key=value line per figure so tools/nvme_vs_fio.sh can set it
// beside fio at the same parameters. Deliberately no fio here: the script runs both.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <exception>
#include <iostream>
#include <string>

#include "executor/offload/nvme_bandwidth.h"

int main(int argc, char** argv) {
  CLI::App app{"strata_nvme_bench: the NVMe tier's sequential O_DIRECT io_uring bandwidth"};
  std::string dir = "/tmp/strata-nvme";
  std::int64_t file_mib = 1024;
  std::int64_t block_kib = 1024;
  int queue_depth = 16;
  app.add_option("--nvme-dir", dir, "directory on the NVMe filesystem")->capture_default_str();
  app.add_option("--file-mib", file_mib, "file size in MiB")->capture_default_str();
  app.add_option("--block-kib", block_kib, "bytes per submission in KiB")->capture_default_str();
  app.add_option("--queue-depth", queue_depth, "submissions in flight")->capture_default_str();
  try {
    app.parse(argc, argv);
    const auto bw = strata::offload::measure_nvme_bandwidth(dir, file_mib << 20, block_kib << 10,
                                                            queue_depth);
    std::cout << fmt::format("mode={}\n", bw.direct ? "O_DIRECT" : "buffered(O_DIRECT refused)")
              << fmt::format("file_bytes={}\nblock_bytes={}\nqueue_depth={}\n", bw.file_bytes,
                             bw.block_bytes, bw.queue_depth)
              << fmt::format("write_bytes_per_s={:.0f}\nread_bytes_per_s={:.0f}\n",
                             bw.write_bytes_per_s, bw.read_bytes_per_s);
    return 0;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "strata_nvme_bench: " << e.what() << "\n";
    return 2;
  }
}
