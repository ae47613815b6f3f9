// ClusterSpec: unit conversion at load (GiB, GB/s, TFLOP/s, us -> SI), round trip, and
// every error path (unknown, missing, wrong type, impossible values, bad backend).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/errors.h"
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
  // The fixture has 2 nodes of 8 GPUs, so both links are required.
  const std::pair<const char*, const char*> keys[] = {
      {"", "name"},           {"", "nodes"},          {"", "gpus_per_node"},
      {"", "device"},         {"", "host"},
      {"", "intra_node"},     {"", "inter_node"},     {"device", "memory_gib"},
      {"device", "bf16_tflops"}, {"device", "fp32_tflops"}, {"device", "hbm_bandwidth_gb_per_s"},
      {"device", "name"},     {"host", "pcie_bandwidth_gb_per_s"},
      {"host", "cpu_cores"},  {"host", "cpu_gflops"}, {"host", "memory_bandwidth_gb_per_s"},
      {"host", "memory_gib"}, {"nvme", "capacity_gb"}, {"nvme", "read_bandwidth_gb_per_s"},
      {"nvme", "write_bandwidth_gb_per_s"}, {"intra_node", "latency_us"},
      {"inter_node", "bandwidth_gb_per_s"},
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
  // gpus_per_node overflowed to 0 GPUs. Each key has a bound (cost_model/specs/limits.h).
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

TEST(ClusterSpec, EveryProblemInOneMessage) {
  // Three problems in three places: a missing key, a wrong type, an unknown key. Today's
  // writer of a cluster file gets all three at once, not one per attempt.
  Json j = cluster_json();
  j["device"].erase("fp32_tflops");
  j["host"]["cpu_cores"] = "many";
  j["inter_node"]["bandwidth_gbps"] = 25;
  expect_error<ConfigError>([&] { ClusterSpec::from_json(j, "c.json"); },
                            {"c.json: 3 problems", "device.fp32_tflops: missing key",
                             "host.cpu_cores", "\"many\"", "an integer",
                             "inter_node.bandwidth_gbps: unknown key"});
  // One line (scripts and the config fuzzer read one), the file named once.
  try {
    ClusterSpec::from_json(j, "c.json");
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.find("c.json", 1), std::string::npos) << message;
  }
  // Every unknown key of one block, not the first only.
  Json unknown = cluster_json();
  unknown["nvme"]["a"] = 1;
  unknown["nvme"]["b"] = 2;
  expect_error<ConfigError>([&] { ClusterSpec::from_json(unknown, "c.json"); },
                            {"2 problems", "nvme.a: unknown key", "nvme.b: unknown key"});
}

TEST(ClusterSpec, OneGpuMachineNeedsOnlyDeviceAndHost) {
  Json j = cluster_json();
  j["nodes"] = 1;
  j["gpus_per_node"] = 1;
  for (const char* block : {"nvme", "intra_node", "inter_node"}) j.erase(block);
  for (const char* block : {"device", "host"}) j[block].erase("source");
  const ClusterSpec c = ClusterSpec::from_json(j, "c.json");
  EXPECT_EQ(c.total_gpus(), 1);
  EXPECT_FALSE(c.has_nvme());
  EXPECT_FALSE(c.has_intra_node());
  EXPECT_FALSE(c.has_inter_node());
  EXPECT_EQ(c.device.source, "");
  // Written back without the blocks it never had.
  EXPECT_EQ(c.to_json(), j);
}

TEST(ClusterSpec, LinksAreRequiredWhereTheyAreCrossed) {
  Json two_nodes = cluster_json();
  two_nodes.erase("inter_node");
  expect_error<ConfigError>([&] { ClusterSpec::from_json(two_nodes, "c.json"); },
                            {"c.json", "inter_node: missing key"});
  two_nodes["nodes"] = 1;  // one node: nothing crosses the network
  EXPECT_FALSE(ClusterSpec::from_json(two_nodes, "c.json").has_inter_node());
  Json eight_gpus = cluster_json();
  eight_gpus.erase("intra_node");
  expect_error<ConfigError>([&] { ClusterSpec::from_json(eight_gpus, "c.json"); },
                            {"c.json", "intra_node: missing key"});
}

TEST(ClusterSpec, SourcesAreOptionalButNotEmpty) {
  Json j = cluster_json();
  for (const char* block : {"device", "host", "nvme", "intra_node", "inter_node"}) {
    j[block].erase("source");
  }
  EXPECT_EQ(ClusterSpec::from_json(j, "c.json").to_json(), j);
  j["device"]["source"] = "";
  expect_error<ConfigError>([&] { ClusterSpec::from_json(j, "c.json"); },
                            {"c.json", "device.source", "non-empty"});
}

TEST(ClusterSpec, HeadroomBlockRoundTrips) {
  Json j = cluster_json();
  j["device_headroom"] = Json::parse(R"({"context_mib": 533, "communicator_mib": 576,
                                         "fragmentation_fraction": 0.05, "source": "measured"})");
  const ClusterSpec c = ClusterSpec::from_json(j, "c.json");
  EXPECT_DOUBLE_EQ(c.headroom.context_bytes, 533.0 * 1048576.0);  // MiB = 2^20
  EXPECT_DOUBLE_EQ(c.headroom.communicator_bytes, 576.0 * 1048576.0);
  EXPECT_DOUBLE_EQ(c.headroom.fragmentation_fraction, 0.05);
  EXPECT_EQ(c.to_json(), j);
  j["device_headroom"]["fragmentation_fraction"] = 1.5;
  expect_error<ConfigError>([&] { ClusterSpec::from_json(j, "c.json"); },
                            {"c.json", "device_headroom.fragmentation_fraction", "[0, 1)"});
}

TEST(ClusterSpec, ShapeOverrides) {
  const ClusterSpec file = ClusterSpec::from_json(cluster_json(), "c.json");  // 2 x 8
  const ClusterSpec big = with_shape(file, ClusterShape{128, 0});
  EXPECT_EQ(big.total_gpus(), 1024);  // 128 nodes x the file's 8
  EXPECT_EQ(with_shape(file, ClusterShape{0, 4}).total_gpus(), 8);  // the file's 2 x 4
  EXPECT_EQ(with_shape(file, ClusterShape{}).total_gpus(), 16);     // unchanged
  expect_error<ConfigError>([&] { with_shape(file, ClusterShape{-1, 0}); },
                            {"--nodes", "-1", "not in 1.."});
  // A one-node file has no network to price: more nodes need an inter_node block.
  Json one = cluster_json();
  one["nodes"] = 1;
  one.erase("inter_node");
  const ClusterSpec single = ClusterSpec::from_json(one, "c.json");
  expect_error<ConfigError>([&] { with_shape(single, ClusterShape{2, 0}); },
                            {"--nodes", "2", "inter_node"});
  one["gpus_per_node"] = 1;
  one.erase("intra_node");
  expect_error<ConfigError>(
      [&] { with_shape(ClusterSpec::from_json(one, "c.json"), ClusterShape{0, 8}); },
      {"--gpus-per-node", "8", "intra_node"});
}

}  // namespace
}  // namespace strata
