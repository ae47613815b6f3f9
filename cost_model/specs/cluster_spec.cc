// ClusterSpec loading and validation; see cluster_spec.h. Converts each unit-carrying JSON
// key (memory_gib, bf16_tflops, bandwidth_gb_per_s, latency_us, capacity_gb) to SI once,
// here, and back in to_json. Does not judge whether the figures are realistic; it only
// rejects impossible ones (zero or negative sizes and rates).
#include "cost_model/specs/cluster_spec.h"

#include <charconv>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/limits.h"
#include "cost_model/specs/units.h"

namespace strata {

std::string to_string(Backend backend) {
  switch (backend) {
    case Backend::kCuda: return "cuda";
    case Backend::kCpu: return "cpu";
  }
  return "unknown";
}

namespace {

// SI value back to the JSON unit. Rounded to 15 significant digits so that a figure written
// by hand (5 us, 2.039 TB/s) reads back as the same decimal after the multiply/divide pair.
double to_unit(double si_value, double unit) {
  const std::string text = fmt::format("{:.15g}", si_value / unit);
  double value = 0;
  // from_chars, unlike stod, ignores the C locale's decimal separator.
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

// The problems of one file, gathered instead of stopping at the first, so that a person
// writing a cluster file sees every missing or wrong key in one message.
class Problems {
 public:
  explicit Problems(std::string source) : source_(std::move(source)) {}

  // Runs one read; its ConfigError becomes a problem and the read's target keeps its default.
  template <typename Read>
  void check(Read&& read) {
    try {
      read();
    } catch (const ConfigError& e) {
      add(e.what());
    }
  }

  // The keys of `r`'s object that nothing read.
  void unread(const JsonObjectReader& r) {
    for (const std::string& key : r.unread_keys()) {
      add(r.unknown_key_message(key));
    }
  }

  // One problem: thrown as it is, the message of a one-problem file unchanged. Several: one
  // line (the fuzzer and scripts read one line), the file named once, "; " between them.
  void throw_if_any() const {
    if (messages_.empty()) return;
    if (messages_.size() == 1) throw ConfigError(source_ + ": " + messages_.front());
    throw ConfigError(fmt::format("{}: {} problems: {}", source_, messages_.size(),
                                  fmt::join(messages_, "; ")));
  }

 private:
  void add(const std::string& message) {
    const std::string prefix = source_ + ": ";
    messages_.push_back(message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message);
  }

  std::string source_;
  std::vector<std::string> messages_;
};

// Optional; when given, a non-empty note.
std::string read_source(JsonObjectReader& r) {
  std::string s = r.get_string_or("source", "");
  if (r.has("source") && s.empty()) {
    r.fail("source", "\"\"", "a non-empty note saying where the figures come from (or no key)");
  }
  return s;
}

// A figure in (0, max] of its unit; at least `min` where a smaller one would overflow a
// quotient (bytes / bandwidth).
double positive(JsonObjectReader& r, const std::string& key, double unit, double max,
                double min = 0) {
  const double v = r.get_number(key);
  r.require_positive(key, v);
  if (v < min) r.fail(key, fmt::format("{}", v), fmt::format("a value >= {}", min));
  r.require_at_most(key, v, max);
  return v * unit;
}

double non_negative(JsonObjectReader& r, const std::string& key, double unit, double max) {
  const double v = r.get_number(key);
  r.require_non_negative(key, v);
  r.require_at_most(key, v, max);
  return v * unit;
}

std::int64_t count(JsonObjectReader& r, const std::string& key, double max) {
  const std::int64_t v = r.get_int(key);
  r.require_positive(key, static_cast<double>(v));
  r.require_at_most(key, static_cast<double>(v), max);
  return v;
}

void source_to_json(Json& json, const std::string& source) {
  if (!source.empty()) json["source"] = source;
}

DeviceSpec device_from_json(JsonObjectReader r, Problems& problems) {
  DeviceSpec d;
  problems.check([&] {
    d.name = r.get_string("name");
    if (d.name.empty()) r.fail("name", "\"\"", "a non-empty device name");
  });
  problems.check([&] { d.memory_bytes = positive(r, "memory_gib", units::kGiB, limits::kDeviceMemoryGib); });
  problems.check([&] {
    d.bf16_flops = positive(r, "bf16_tflops", units::kTera, limits::kTflops, limits::kMinTflops);
  });
  problems.check([&] {
    d.fp32_flops = positive(r, "fp32_tflops", units::kTera, limits::kTflops, limits::kMinTflops);
  });
  problems.check([&] {
    d.memory_bandwidth_bytes_per_s = positive(r, "hbm_bandwidth_gb_per_s", units::kGB,
                                              limits::kBandwidthGbPerS, limits::kMinBandwidthGbPerS);
  });
  problems.check([&] { d.source = read_source(r); });
  problems.unread(r);
  return d;
}

Json block_json(const DeviceSpec& d) {
  Json json{{"name", d.name},
            {"memory_gib", to_unit(d.memory_bytes, units::kGiB)},
            {"bf16_tflops", to_unit(d.bf16_flops, units::kTera)},
            {"fp32_tflops", to_unit(d.fp32_flops, units::kTera)},
            {"hbm_bandwidth_gb_per_s", to_unit(d.memory_bandwidth_bytes_per_s, units::kGB)}};
  source_to_json(json, d.source);
  return json;
}

HostSpec host_from_json(JsonObjectReader r, Problems& problems) {
  HostSpec h;
  problems.check([&] { h.memory_bytes = positive(r, "memory_gib", units::kGiB, limits::kHostMemoryGib); });
  problems.check([&] {
    h.pcie_bandwidth_bytes_per_s = positive(r, "pcie_bandwidth_gb_per_s", units::kGB,
                                            limits::kBandwidthGbPerS, limits::kMinBandwidthGbPerS);
  });
  problems.check([&] { h.cpu_cores = count(r, "cpu_cores", limits::kCpuCores); });
  problems.check([&] {
    h.cpu_flops = positive(r, "cpu_gflops", units::kGiga, limits::kCpuGflops,
                           limits::kMinTflops * 1e3);
  });
  problems.check([&] {
    h.memory_bandwidth_bytes_per_s = positive(r, "memory_bandwidth_gb_per_s", units::kGB,
                                              limits::kBandwidthGbPerS, limits::kMinBandwidthGbPerS);
  });
  problems.check([&] { h.source = read_source(r); });
  problems.unread(r);
  return h;
}

Json block_json(const HostSpec& h) {
  Json json{{"memory_gib", to_unit(h.memory_bytes, units::kGiB)},
            {"pcie_bandwidth_gb_per_s", to_unit(h.pcie_bandwidth_bytes_per_s, units::kGB)},
            {"cpu_cores", h.cpu_cores},
            {"cpu_gflops", to_unit(h.cpu_flops, units::kGiga)},
            {"memory_bandwidth_gb_per_s", to_unit(h.memory_bandwidth_bytes_per_s, units::kGB)}};
  source_to_json(json, h.source);
  return json;
}

// A block with capacity 0 says "no NVMe" as the absent block does; one that has capacity
// must be able to read and write it.
NvmeSpec nvme_from_json(JsonObjectReader r, Problems& problems) {
  NvmeSpec n;
  problems.check([&] {
    n.capacity_bytes = non_negative(r, "capacity_gb", units::kGB, limits::kNvmeCapacityGb);
  });
  for (auto [key, rate] : {std::pair{"read_bandwidth_gb_per_s", &n.read_bytes_per_s},
                           std::pair{"write_bandwidth_gb_per_s", &n.write_bytes_per_s}}) {
    problems.check([&, key = key, rate = rate] {
      *rate = non_negative(r, key, units::kGB, limits::kBandwidthGbPerS);
      if (n.capacity_bytes > 0) {
        r.require_positive(key, *rate);
        if (*rate < limits::kMinBandwidthGbPerS * units::kGB) {
          r.fail(key, fmt::format("{}", *rate / units::kGB),
                 fmt::format("a value >= {}", limits::kMinBandwidthGbPerS));
        }
      }
    });
  }
  problems.check([&] { n.source = read_source(r); });
  problems.unread(r);
  return n;
}

Json block_json(const NvmeSpec& n) {
  Json json{{"capacity_gb", to_unit(n.capacity_bytes, units::kGB)},
            {"read_bandwidth_gb_per_s", to_unit(n.read_bytes_per_s, units::kGB)},
            {"write_bandwidth_gb_per_s", to_unit(n.write_bytes_per_s, units::kGB)}};
  source_to_json(json, n.source);
  return json;
}

LinkSpec link_from_json(JsonObjectReader r, Problems& problems) {
  LinkSpec l;
  problems.check([&] {
    l.bandwidth_bytes_per_s = positive(r, "bandwidth_gb_per_s", units::kGB,
                                       limits::kBandwidthGbPerS, limits::kMinBandwidthGbPerS);
  });
  problems.check([&] { l.latency_s = non_negative(r, "latency_us", units::kMicrosecond, limits::kLatencyUs); });
  problems.check([&] { l.source = read_source(r); });
  problems.unread(r);
  return l;
}

Json block_json(const LinkSpec& l) {
  Json json{{"bandwidth_gb_per_s", to_unit(l.bandwidth_bytes_per_s, units::kGB)},
            {"latency_us", to_unit(l.latency_s, units::kMicrosecond)}};
  source_to_json(json, l.source);
  return json;
}

// Reads block `key` with `read` when it is there (a problem when it is missing and required).
template <typename Spec, typename Read>
void read_block(JsonObjectReader& r, const std::string& key, bool required, Problems& problems,
                Spec& target, Read read) {
  if (!required && !r.has(key)) return;
  problems.check([&] { target = read(r.get_object(key), problems); });
}

std::int64_t shape_value(const std::string& flag, std::int64_t value, double max,
                         std::int64_t file_value) {
  if (value == 0) return file_value;
  if (value < 1 || static_cast<double>(value) > max) {
    throw ConfigError(fmt::format("{}: value {} is not in 1..{}", flag, value, max));
  }
  return value;
}

}  // namespace

ClusterSpec ClusterSpec::from_json(const Json& json, const std::string& source) {
  JsonObjectReader r(json, source);
  Problems problems(source);
  ClusterSpec c;
  problems.check([&] {
    c.name = r.get_string("name");
    if (c.name.empty()) r.fail("name", "\"\"", "a non-empty name");
  });
  problems.check([&] {
    c.backend = r.get_enum_or("backend", {"cuda", "cpu"}, "cuda") == "cpu" ? Backend::kCpu
                                                                           : Backend::kCuda;
  });
  problems.check([&] { c.nodes = count(r, "nodes", limits::kNodes); });
  problems.check([&] { c.gpus_per_node = count(r, "gpus_per_node", limits::kGpusPerNode); });
  read_block(r, "device", true, problems, c.device, device_from_json);
  read_block(r, "host", true, problems, c.host, host_from_json);
  read_block(r, "nvme", false, problems, c.nvme, nvme_from_json);
  // One GPU per node has no link inside a node (collectives.cc prices none).
  read_block(r, "intra_node", c.gpus_per_node > 1, problems, c.intra_node, link_from_json);
  // A one-node cluster never crosses the network (collectives.cc: group_link).
  read_block(r, "inter_node", c.nodes > 1, problems, c.inter_node, link_from_json);
  if (r.has("host_headroom")) {
    problems.check([&] { c.host_headroom = host_headroom_from_json(r.get_object("host_headroom")); });
  }
  if (r.has("device_headroom")) {
    problems.check([&] { c.headroom = device_headroom_from_json(r.get_object("device_headroom")); });
  }
  problems.unread(r);
  problems.throw_if_any();
  return c;
}

ClusterSpec ClusterSpec::load(const std::string& path) {
  return from_json(read_json_file(path), path);
}

Json ClusterSpec::to_json() const {
  Json json{{"name", name},
            {"backend", to_string(backend)},
            {"nodes", nodes},
            {"gpus_per_node", gpus_per_node},
            {"device", block_json(device)},
            {"host", block_json(host)}};
  if (has_intra_node()) json["intra_node"] = block_json(intra_node);
  if (has_nvme() || !nvme.source.empty()) json["nvme"] = block_json(nvme);
  if (has_inter_node()) json["inter_node"] = block_json(inter_node);
  if (headroom.any() || !headroom.source.empty()) json["device_headroom"] = strata::to_json(headroom);
  if (host_headroom.any() || !host_headroom.source.empty()) {
    json["host_headroom"] = strata::to_json(host_headroom);
  }
  return json;
}

ClusterSpec with_shape(ClusterSpec cluster, const ClusterShape& shape) {
  cluster.nodes = shape_value("--nodes", shape.nodes, limits::kNodes, cluster.nodes);
  cluster.gpus_per_node =
      shape_value("--gpus-per-node", shape.gpus_per_node, limits::kGpusPerNode, cluster.gpus_per_node);
  if (cluster.gpus_per_node > 1 && !cluster.has_intra_node()) {
    throw ConfigError(fmt::format(
        "--gpus-per-node: value {} needs the link between a node's GPUs, but cluster '{}' is a "
        "one-GPU-per-node file without an \"intra_node\" block (bandwidth_gb_per_s, latency_us "
        "per GPU); add one",
        cluster.gpus_per_node, cluster.name));
  }
  if (cluster.nodes > 1 && !cluster.has_inter_node()) {
    throw ConfigError(fmt::format(
        "--nodes: value {} needs the network between nodes, but cluster '{}' is a one-node file "
        "without an \"inter_node\" block (bandwidth_gb_per_s, latency_us per GPU); add one",
        cluster.nodes, cluster.name));
  }
  return cluster;
}

}  // namespace strata
