// The shared-directory check across a job's ranks (shared_dir_probe.h).
#include "executor/comm/shared_dir_probe.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cost_model/specs/errors.h"

namespace strata {
namespace fs = std::filesystem;

std::string unshared_dir_message(const std::string& flag, const fs::path& dir,
                                 const std::vector<std::vector<bool>>& seen,
                                 const NodeLayout& layout) {
  // (viewer host, writer host) pairs, each once, in host order.
  std::vector<std::pair<int, int>> unseen;
  for (size_t r = 0; r < seen.size(); ++r) {
    for (size_t q = 0; q < seen[r].size(); ++q) {
      if (seen[r][q]) continue;
      const std::pair<int, int> pair{layout.node_of(static_cast<int>(r)),
                                     layout.node_of(static_cast<int>(q))};
      if (std::find(unseen.begin(), unseen.end(), pair) == unseen.end()) unseen.push_back(pair);
    }
  }
  if (unseen.empty()) return {};
  std::sort(unseen.begin(), unseen.end());
  std::vector<std::string> parts;
  for (const auto& [viewer, writer] : unseen) {
    parts.push_back(viewer == writer
                        ? fmt::format("host {} does not see its own files there", layout.host(viewer))
                        : fmt::format("host {} does not see what host {} writes there",
                                      layout.host(viewer), layout.host(writer)));
  }
  return fmt::format("{} '{}': not one directory for every rank ({}): {}; it must be on a "
                     "filesystem every node mounts at that path (rank 0 writes the report, "
                     "every rank its checkpoint shard)",
                     flag, dir.string(), layout.describe(), fmt::join(parts, "; "));
}

void check_dir_shared(const std::string& flag, const fs::path& dir, Communicator& world,
                      const NodeLayout& layout) {
  std::int64_t job = 0;
  if (world.rank() == 0) job = static_cast<std::int64_t>(std::random_device{}() >> 1);
  world.broadcast(&job, 1, 0);
  const auto probe = [&](int rank) { return dir / fmt::format(".strata-probe-{}-{}", job, rank); };
  const fs::path mine = probe(world.rank());
  {
    std::ofstream out(mine, std::ios::trunc);
    out << layout.host_of(world.rank()) << "\n";
    out.close();
    if (out.fail()) {
      throw SystemError(fmt::format("{}: rank {} on {} cannot write the probe file '{}'", flag,
                                    world.rank(), layout.host_of(world.rank()), mine.string()));
    }
  }
  world.barrier();
  const int n = world.size();
  std::vector<std::int32_t> mine_seen(static_cast<size_t>(n)), all(static_cast<size_t>(n) * n);
  for (int q = 0; q < n; ++q) {
    std::error_code ec;
    mine_seen[static_cast<size_t>(q)] = fs::exists(probe(q), ec) ? 1 : 0;
  }
  world.all_gather(mine_seen.data(), all.data(), n);  // also: every rank has looked
  std::error_code ec;
  fs::remove(mine, ec);
  std::vector<std::vector<bool>> seen(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    for (int q = 0; q < n; ++q) seen[static_cast<size_t>(r)].push_back(all[static_cast<size_t>(r * n + q)] != 0);
  }
  const std::string message = unshared_dir_message(flag, dir, seen, layout);
  if (!message.empty()) throw ConfigError(message);
}

}  // namespace strata
