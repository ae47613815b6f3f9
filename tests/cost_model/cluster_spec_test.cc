// ClusterSpec: unit conversion at load (GiB, GB/s, TFLOP/s, us -> SI), round trip, and
// every error path (unknown, missing, wrong type, impossible values, bad backend).
#include <gtest/gtest.h>

#include "cost_model/cluster_spec.h"
#include "cost_model/errors.h"
#include "tests/cost_model/spec_test_util.h"

namespace strata {
namespace {

using strata::testing::expect_error;

Json cluster_json() {
  return Json::parse(R"({
    "name": "c", "backend": "cuda", "nodes": 2, "gpus_per_node": 8,
    "device": {"name": "A100", "memory_gib": 80, "bf16_tflops": 312, "fp32_tflops": 19.5,
               "hbm_bandwidth_gb_per_s": 2039, "source": "datasheet"},
    "host": {"memory_gib": 2048, "pcie_bandwidth_gb_per_s": 25, "cpu_cores": 128,
             "cpu_gflops": 9216, "memory_bandwidth_gb_per_s": 409.6, "source": "datasheet"},
    "nvme": {"capacity_gb": 15360, "read_bandwidth_gb_per_s": 24,
             "write_bandwidth_gb_per_s": 12, "source": "estimate"},
    "intra_node": {"bandwidth_gb_per_s": 300, "latency_us": 3, "source": "NVSwitch"},
    "inter_node": {"bandwidth_gb_per_s": 25, "latency_us": 5.5, "source": "HDR IB"}})");
}

TEST(ClusterSpec, ConvertsUnitsOnce) {
  const ClusterSpec c = ClusterSpec::from_json(cluster_json(), "c.json");
  EXPECT_EQ(c.backend, Backend::kCuda);
  EXPECT_EQ(c.total_gpus(), 16);                                   // 2 nodes x 8
  EXPECT_DOUBLE_EQ(c.device.memory_bytes, 80.0 * 1073741824.0);    // GiB = 2^30
  EXPECT_DOUBLE_EQ(c.device.bf16_flops, 312e12);                   // TFLOP/s
  EXPECT_DOUBLE_EQ(c.device.fp32_flops, 19.5e12);
  EXPECT_DOUBLE_EQ(c.device.memory_bandwidth_bytes_per_s, 2039e9); // GB = 1e9
  EXPECT_DOUBLE_EQ(c.host.memory_bytes, 2048.0 * 1073741824.0);
  EXPECT_DOUBLE_EQ(c.host.cpu_flops, 9216e9);                      // GFLOP/s
  EXPECT_DOUBLE_EQ(c.host.memory_bandwidth_bytes_per_s, 409.6e9);
  EXPECT_DOUBLE_EQ(c.nvme.capacity_bytes, 15360e9);
  EXPECT_DOUBLE_EQ(c.intra_node.bandwidth_bytes_per_s, 300e9);
  EXPECT_DOUBLE_EQ(c.inter_node.latency_s, 5.5e-6);                // us
  EXPECT_EQ(c.device.source, "datasheet");
}

TEST(ClusterSpec, RoundTripsExactly) {
  const ClusterSpec c = ClusterSpec::from_json(cluster_json(), "c.json");
  EXPECT_EQ(c.to_json(), cluster_json());
}

TEST(ClusterSpec, BackendIsOptionalAndDefaultsToCuda) {
  Json j = cluster_json();
  j.erase("backend");
  EXPECT_EQ(ClusterSpec::from_json(j, "c.json").backend, Backend::kCuda);
  j["backend"] = "cpu";
  const ClusterSpec cpu = ClusterSpec::from_json(j, "c.json");
  EXPECT_EQ(cpu.backend, Backend::kCpu);
  EXPECT_EQ(to_string(cpu.backend), "cpu");
  j["backend"] = "tpu";
  expect_error<ConfigError>([&] { ClusterSpec::from_json(j, "c.json"); },
                            {"c.json", "backend", "\"tpu\"", "one of cuda, cpu"});
}

TEST(ClusterSpec, UnknownKeysAtEveryLevel) {
  for (const char* block : {"", "device", "host", "nvme", "intra_node", "inter_node"}) {
    Json j = cluster_json();
    Json& target = std::string(block).empty() ? j : j[block];
    target["nvlink_gbps"] = 1;
    const std::string path = std::string(block).empty() ? "nvlink_gbps"
                                                        : std::string(block) + ".nvlink_gbps";
    expect_error<ConfigError>([&] { ClusterSpec::from_json(j, "c.json"); },
                              {"c.json", path, "unknown key"});
  }
}

TEST(ClusterSpec, MissingKeysNameTheirPath) {
  const std::pair<const char*, const char*> keys[] = {
      {"", "name"},           {"", "nodes"},          {"", "gpus_per_node"},
      {"", "device"},         {"", "host"},           {"", "nvme"},
      {"", "intra_node"},     {"", "inter_node"},     {"device", "memory_gib"},
      {"device", "bf16_tflops"}, {"device", "fp32_tflops"}, {"device", "hbm_bandwidth_gb_per_s"},
      {"device", "source"},   {"device", "name"},     {"host", "pcie_bandwidth_gb_per_s"},
      {"host", "cpu_cores"},  {"host", "cpu_gflops"}, {"host", "memory_bandwidth_gb_per_s"},
      {"host", "memory_gib"}, {"nvme", "capacity_gb"}, {"nvme", "read_bandwidth_gb_per_s"},
      {"nvme", "write_bandwidth_gb_per_s"}, {"intra_node", "latency_us"},
      {"inter_node", "bandwidth_gb_per_s"}, {"inter_node", "source"},
  };
  for (const auto& [block, key] : keys) {
    Json j = cluster_json();
    const std::string b = block;
    (b.empty() ? j : j[b]).erase(key);
    const std::string path = b.empty() ? key : b + "." + key;
    expect_error<ConfigError>([&] { ClusterSpec::from_json(j, "c.json"); },
                              {"c.json", path, "missing key"});
  }
}

TEST(ClusterSpec, WrongTypes) {
  Json j = cluster_json();
  j["device"]["memory_gib"] = "80";
  expect_error<ConfigError>([&] { ClusterSpec::from_json(j, "c.json"); },
                            {"c.json", "device.memory_gib", "\"80\"", "a number"});
  j = cluster_json();
  j["host"]["cpu_cores"] = 1.5;
  expect_error<ConfigError>([&] { ClusterSpec::from_json(j, "c.json"); },
                            {"c.json", "host.cpu_cores", "1.5", "an integer"});
  j = cluster_json();
  j["intra_node"] = 300;
  expect_error<ConfigError>([&] { ClusterSpec::from_json(j, "c.json"); },
                            {"c.json", "intra_node", "300", "an object"});
}

TEST(ClusterSpec, ImpossibleValues) {
  // Sizes and rates that must be > 0.
  const std::pair<const char*, const char*> positive[] = {
      {"", "nodes"},
      {"", "gpus_per_node"},
      {"device", "memory_gib"},
      {"device", "bf16_tflops"},
      {"device", "fp32_tflops"},
      {"device", "hbm_bandwidth_gb_per_s"},
      {"host", "memory_gib"},
      {"host", "pcie_bandwidth_gb_per_s"},
      {"host", "cpu_cores"},
      {"host", "cpu_gflops"},
      {"host", "memory_bandwidth_gb_per_s"},
      {"intra_node", "bandwidth_gb_per_s"},
      {"inter_node", "bandwidth_gb_per_s"},
  };
  for (const auto& [block, key] : positive) {
    Json j = cluster_json();
    const std::string b = block;
    (b.empty() ? j : j[b])[key] = 0;
    const std::string path = b.empty() ? key : b + "." + key;
    expect_error<ConfigError>([&] { ClusterSpec::from_json(j, "c.json"); },
                              {"c.json", path, "got 0", "> 0"});
  }
  // Absurd magnitudes: a memory of 1e308 GiB once became a budget of -2^63 bytes, and nodes x
  // gpus_per_node overflowed to 0 GPUs. Each key has a bound (cost_model/limits.h).
  const std::pair<const char*, const char*> bounded[] = {
      {"", "nodes"}, {"", "gpus_per_node"}, {"device", "memory_gib"}, {"host", "memory_gib"},
      {"host", "cpu_cores"}, {"nvme", "capacity_gb"}, {"inter_node", "latency_us"}};
  for (const auto& [block, key] : bounded) {
    Json j = cluster_json();
    const std::string b = block;
    const std::string k = key;
    const bool integer = k == "nodes" || k == "gpus_per_node" || k == "cpu_cores";
    if (integer) {
      (b.empty() ? j : j[b])[key] = std::int64_t{1} << 62;
    } else {
      (b.empty() ? j : j[b])[key] = 1e308;
    }
    const std::string path = b.empty() ? key : b + "." + key;
    expect_error<ConfigError>([&] { ClusterSpec::from_json(j, "c.json"); },
                              {"c.json", path, "<= "});
  }
  // A positive rate so small that bytes / rate would overflow.
  Json slow = cluster_json();
  slow["intra_node"]["bandwidth_gb_per_s"] = 1e-300;
  expect_error<ConfigError>([&] { ClusterSpec::from_json(slow, "c.json"); },
                            {"c.json", "intra_node.bandwidth_gb_per_s", ">= 1e-09"});
  // Values that may be 0 but never negative.
  const std::pair<const char*, const char*> non_negative[] = {
      {"nvme", "capacity_gb"}, {"intra_node", "latency_us"}, {"inter_node", "latency_us"}};
  for (const auto& [block, key] : non_negative) {
    Json j = cluster_json();
    j[block][key] = -1;
    expect_error<ConfigError>([&] { ClusterSpec::from_json(j, "c.json"); },
                              {"c.json", std::string(block) + "." + key, "-1", ">= 0"});
  }
  Json src = cluster_json();
  src["host"]["source"] = "";
  expect_error<ConfigError>([&] { ClusterSpec::from_json(src, "c.json"); },
                            {"c.json", "host.source", "non-empty"});
}

TEST(ClusterSpec, NvmeMayBeAbsentButNotUnreadable) {
  Json none = cluster_json();
  none["nvme"] = Json::parse(R"({"capacity_gb": 0, "read_bandwidth_gb_per_s": 0,
                                 "write_bandwidth_gb_per_s": 0, "source": "no NVMe"})");
  EXPECT_DOUBLE_EQ(ClusterSpec::from_json(none, "c.json").nvme.capacity_bytes, 0.0);
  Json unreadable = cluster_json();
  unreadable["nvme"]["read_bandwidth_gb_per_s"] = 0;  // 15 TB that cannot be read
  expect_error<ConfigError>([&] { ClusterSpec::from_json(unreadable, "c.json"); },
                            {"c.json", "nvme.read_bandwidth_gb_per_s", "got 0", "> 0"});
}

}  // namespace
}  // namespace strata
