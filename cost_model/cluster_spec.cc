// ClusterSpec loading and validation; see cluster_spec.h. Converts each unit-carrying JSON
// key (memory_gib, bf16_tflops, bandwidth_gb_per_s, latency_us, capacity_gb) to SI once,
// here, and back in to_json. Does not judge whether the figures are realistic; it only
// rejects impossible ones (zero or negative sizes and rates).
#include "cost_model/cluster_spec.h"

#include <charconv>
#include <string>

#include <fmt/format.h>

#include "cost_model/errors.h"
#include "cost_model/limits.h"
#include "cost_model/units.h"

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

std::string read_source(JsonObjectReader& r) {
  std::string s = r.get_string("source");
  if (s.empty()) r.fail("source", "\"\"", "a non-empty note saying where the figures come from");
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

DeviceSpec device_from_json(JsonObjectReader r) {
  DeviceSpec d;
  d.name = r.get_string("name");
  if (d.name.empty()) r.fail("name", "\"\"", "a non-empty device name");
  d.memory_bytes = positive(r, "memory_gib", units::kGiB, limits::kDeviceMemoryGib);
  d.bf16_flops = positive(r, "bf16_tflops", units::kTera, limits::kTflops, limits::kMinTflops);
  d.fp32_flops = positive(r, "fp32_tflops", units::kTera, limits::kTflops, limits::kMinTflops);
  d.memory_bandwidth_bytes_per_s = positive(r, "hbm_bandwidth_gb_per_s", units::kGB,
                                            limits::kBandwidthGbPerS, limits::kMinBandwidthGbPerS);
  d.source = read_source(r);
  r.finish();
  return d;
}

Json to_json(const DeviceSpec& d) {
  return Json{{"name", d.name},
              {"memory_gib", to_unit(d.memory_bytes, units::kGiB)},
              {"bf16_tflops", to_unit(d.bf16_flops, units::kTera)},
              {"fp32_tflops", to_unit(d.fp32_flops, units::kTera)},
              {"hbm_bandwidth_gb_per_s", to_unit(d.memory_bandwidth_bytes_per_s, units::kGB)},
              {"source", d.source}};
}

HostSpec host_from_json(JsonObjectReader r) {
  HostSpec h;
  h.memory_bytes = positive(r, "memory_gib", units::kGiB, limits::kHostMemoryGib);
  h.pcie_bandwidth_bytes_per_s = positive(r, "pcie_bandwidth_gb_per_s", units::kGB,
                                          limits::kBandwidthGbPerS, limits::kMinBandwidthGbPerS);
  h.cpu_cores = r.get_int("cpu_cores");
  r.require_positive("cpu_cores", static_cast<double>(h.cpu_cores));
  r.require_at_most("cpu_cores", static_cast<double>(h.cpu_cores), limits::kCpuCores);
  h.cpu_flops = positive(r, "cpu_gflops", units::kGiga, limits::kCpuGflops,
                         limits::kMinTflops * 1e3);
  h.memory_bandwidth_bytes_per_s = positive(r, "memory_bandwidth_gb_per_s", units::kGB,
                                            limits::kBandwidthGbPerS, limits::kMinBandwidthGbPerS);
  h.source = read_source(r);
  r.finish();
  return h;
}

Json to_json(const HostSpec& h) {
  return Json{{"memory_gib", to_unit(h.memory_bytes, units::kGiB)},
              {"pcie_bandwidth_gb_per_s", to_unit(h.pcie_bandwidth_bytes_per_s, units::kGB)},
              {"cpu_cores", h.cpu_cores},
              {"cpu_gflops", to_unit(h.cpu_flops, units::kGiga)},
              {"memory_bandwidth_gb_per_s", to_unit(h.memory_bandwidth_bytes_per_s, units::kGB)},
              {"source", h.source}};
}

// A node may have no NVMe (capacity 0, bandwidths 0); one that has capacity must be able
// to read and write it.
NvmeSpec nvme_from_json(JsonObjectReader r) {
  NvmeSpec n;
  n.capacity_bytes = non_negative(r, "capacity_gb", units::kGB, limits::kNvmeCapacityGb);
  n.read_bytes_per_s = non_negative(r, "read_bandwidth_gb_per_s", units::kGB,
                                    limits::kBandwidthGbPerS);
  n.write_bytes_per_s = non_negative(r, "write_bandwidth_gb_per_s", units::kGB,
                                     limits::kBandwidthGbPerS);
  if (n.capacity_bytes > 0) {
    r.require_positive("read_bandwidth_gb_per_s", n.read_bytes_per_s);
    r.require_positive("write_bandwidth_gb_per_s", n.write_bytes_per_s);
    for (const auto& [key, rate] : {std::pair{"read_bandwidth_gb_per_s", n.read_bytes_per_s},
                                    std::pair{"write_bandwidth_gb_per_s", n.write_bytes_per_s}}) {
      if (rate < limits::kMinBandwidthGbPerS * units::kGB) {
        r.fail(key, fmt::format("{}", rate / units::kGB),
               fmt::format("a value >= {}", limits::kMinBandwidthGbPerS));
      }
    }
  }
  n.source = read_source(r);
  r.finish();
  return n;
}

Json to_json(const NvmeSpec& n) {
  return Json{{"capacity_gb", to_unit(n.capacity_bytes, units::kGB)},
              {"read_bandwidth_gb_per_s", to_unit(n.read_bytes_per_s, units::kGB)},
              {"write_bandwidth_gb_per_s", to_unit(n.write_bytes_per_s, units::kGB)},
              {"source", n.source}};
}

LinkSpec link_from_json(JsonObjectReader r) {
  LinkSpec l;
  l.bandwidth_bytes_per_s = positive(r, "bandwidth_gb_per_s", units::kGB,
                                     limits::kBandwidthGbPerS, limits::kMinBandwidthGbPerS);
  l.latency_s = non_negative(r, "latency_us", units::kMicrosecond, limits::kLatencyUs);
  l.source = read_source(r);
  r.finish();
  return l;
}

Json to_json(const LinkSpec& l) {
  return Json{{"bandwidth_gb_per_s", to_unit(l.bandwidth_bytes_per_s, units::kGB)},
              {"latency_us", to_unit(l.latency_s, units::kMicrosecond)},
              {"source", l.source}};
}

}  // namespace

ClusterSpec ClusterSpec::from_json(const Json& json, const std::string& source) {
  JsonObjectReader r(json, source);
  ClusterSpec c;
  c.name = r.get_string("name");
  if (c.name.empty()) r.fail("name", "\"\"", "a non-empty name");
  // The one optional key: nearly every cluster is a CUDA one.
  c.backend = r.get_enum_or("backend", {"cuda", "cpu"}, "cuda") == "cpu" ? Backend::kCpu
                                                                         : Backend::kCuda;
  c.nodes = r.get_int("nodes");
  r.require_positive("nodes", static_cast<double>(c.nodes));
  r.require_at_most("nodes", static_cast<double>(c.nodes), limits::kNodes);
  c.gpus_per_node = r.get_int("gpus_per_node");
  r.require_positive("gpus_per_node", static_cast<double>(c.gpus_per_node));
  r.require_at_most("gpus_per_node", static_cast<double>(c.gpus_per_node), limits::kGpusPerNode);
  c.device = device_from_json(r.get_object("device"));
  c.host = host_from_json(r.get_object("host"));
  c.nvme = nvme_from_json(r.get_object("nvme"));
  c.intra_node = link_from_json(r.get_object("intra_node"));
  c.inter_node = link_from_json(r.get_object("inter_node"));
  r.finish();
  return c;
}

ClusterSpec ClusterSpec::load(const std::string& path) {
  return from_json(read_json_file(path), path);
}

Json ClusterSpec::to_json() const {
  return Json{{"name", name},
              {"backend", to_string(backend)},
              {"nodes", nodes},
              {"gpus_per_node", gpus_per_node},
              {"device", strata::to_json(device)},
              {"host", strata::to_json(host)},
              {"nvme", strata::to_json(nvme)},
              {"intra_node", strata::to_json(intra_node)},
              {"inter_node", strata::to_json(inter_node)}};
}

}  // namespace strata
