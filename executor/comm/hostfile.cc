// Open MPI hostfiles (hostfile.h).
#include "executor/comm/hostfile.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata {

std::vector<HostSlots> parse_hostfile(const std::string& text, const std::string& source) {
  std::vector<HostSlots> hosts;
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host;
    if (!(words >> host)) continue;  // blank or comment
    int slots = 1;
    for (std::string word; words >> word;) {
      if (word.rfind("slots=", 0) != 0) continue;  // max_slots= and the like: mpirun's
      const std::string value = word.substr(6);
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), slots);
      if (ec != std::errc() || end != value.data() + value.size() || slots < 1) {
        throw ConfigError(fmt::format("{}:{}: '{}': expected slots=K with K a positive integer",
                                      source, number, word));
      }
    }
    const auto same = std::find_if(hosts.begin(), hosts.end(),
                                   [&](const HostSlots& h) { return h.host == host; });
    if (same != hosts.end()) {
      same->slots += slots;
    } else {
      hosts.push_back({host, slots});
    }
  }
  if (hosts.empty()) {
    throw ConfigError(fmt::format("{}: no host listed; expected lines like 'node1 slots=8'", source));
  }
  return hosts;
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("--hostfile: cannot read '{}'", path));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path);
}

}  // namespace strata
