// Profile: round trip, optional rates, and every error path of its tables.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/profile.h"
#include "tests/cost_model/spec_test_util.h"

namespace strata {
namespace {

using strata::testing::expect_error;

Json profile_json() {
  return Json::parse(R"({
    "machine": "host-a", "backend": "cpu",
    "gemm": [{"m": 64, "n": 64, "k": 64, "flops_per_s": 2e10},
             {"m": 1024, "n": 256, "k": 64, "flops_per_s": 5e10}],
    "elementwise_bytes_per_s": 8e9, "attention_flops_per_s": 1e10,
    "attention_backward_flops_per_s": 2e10, "elementwise_backward_bytes_per_s": 6e9,
    "host_to_device_bytes_per_s": 5e9, "device_to_host_bytes_per_s": 5e9,
    "nvme_read_bytes_per_s": 1e9, "nvme_write_bytes_per_s": 5e8,
    "cpu_adam_params_per_s": 2e8, "device_adam_params_per_s": 2e8,
    "host_memory_bytes_per_s": 2e10, "memory_working_set_bytes": 2147483648,
    "last_level_cache_bytes": 536870912,
    "op_overhead_s": 2e-6, "threads_per_rank": 1,
    "busy_cores_slowdown": 1.25, "busy_cores": 2, "busy_cores_slowdown_asks": [1.25],
    "time_sliced_sync_s": 2e-05, "time_sliced_sync_asks": [1e-05, 3e-05],
    "compute_time_scale": 1.1, "compute_time_scale_asks": [1.0, 1.1, 1.3],
    "comm_time_scale": 2.5, "comm_time_scale_asks": [],
    "collectives": [{"op": "all_reduce", "link": "intra_node", "ranks": 4, "latency_s": 1e-5,
                     "bus_bandwidth_bytes_per_s": 3e9}]})");
}

TEST(Profile, RoundTrips) {
  const Profile p = Profile::from_json(profile_json(), "p.json");
  EXPECT_EQ(p.backend, "cpu");
  ASSERT_EQ(p.gemm.size(), 2u);
  EXPECT_EQ(p.gemm[1].m, 1024);
  EXPECT_DOUBLE_EQ(p.gemm[1].flops_per_s, 5e10);
  ASSERT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(p.collectives[0].ranks, 4);
  EXPECT_DOUBLE_EQ(p.op_overhead_s, 2e-6);
  EXPECT_DOUBLE_EQ(p.attention_backward_flops_per_s, 2e10);
  EXPECT_EQ(p.threads_per_rank, 1);
  EXPECT_DOUBLE_EQ(p.busy_cores_slowdown, 1.25);
  EXPECT_EQ(p.busy_cores, 2);
  EXPECT_DOUBLE_EQ(p.compute_time_scale, 1.1);
  EXPECT_EQ(p.compute_time_scale_asks, (std::vector<double>{1.0, 1.1, 1.3}));
  EXPECT_DOUBLE_EQ(p.comm_time_scale, 2.5);
  EXPECT_TRUE(p.comm_time_scale_asks.empty());  // set by hand
  EXPECT_DOUBLE_EQ(p.time_sliced_sync_s, 2e-5);
  EXPECT_EQ(p.time_sliced_sync_asks, (std::vector<double>{1e-5, 3e-5}));
  EXPECT_EQ(p.to_json(), profile_json());
}

TEST(Profile, RatesAreOptionalAndZeroMeansUnmeasured) {
  const Json j = Json::parse(R"({"machine": "m", "backend": "cuda", "gemm": [], "collectives": []})");
  const Profile p = Profile::from_json(j, "p.json");
  EXPECT_EQ(p.nvme_read_bytes_per_s, 0.0);
  EXPECT_EQ(p.cpu_adam_params_per_s, 0.0);
  EXPECT_TRUE(p.gemm.empty());
  // Written back with every rate, so it reads the same again.
  EXPECT_EQ(Profile::from_json(p.to_json(), "again").to_json(), p.to_json());
}

TEST(Profile, ErrorPaths) {
  Json j = profile_json();
  j["nvme_bw"] = 1;
  expect_error<ConfigError>([&] { Profile::from_json(j, "p.json"); },
                            {"p.json", "nvme_bw", "unknown key"});
  for (const char* key : {"machine", "backend", "gemm", "collectives"}) {
    j = profile_json();
    j.erase(key);
    expect_error<ConfigError>([&] { Profile::from_json(j, "p.json"); },
                              {"p.json", key, "missing key"});
  }
  // One value made bad at a time: (JSON pointer, value, what the message must name).
  struct BadValue {
    const char* pointer;
    Json value;
    std::vector<std::string> fragments;
  };
  const std::vector<BadValue> cases = {
      {"/backend", "rocm", {"backend", "\"rocm\"", "one of cpu, cuda"}},
      {"/host_to_device_bytes_per_s", -1, {"host_to_device_bytes_per_s", "-1", ">= 0"}},
      {"/busy_cores_slowdown", -0.5, {"busy_cores_slowdown", "-0.5", ">= 0"}},
      {"/compute_time_scale", -2, {"compute_time_scale", "-2", ">= 0"}},
      {"/comm_time_scale", -1.5, {"comm_time_scale", "-1.5", ">= 0"}},
      {"/compute_time_scale_asks", "many", {"compute_time_scale_asks"}},
      {"/comm_time_scale_asks", Json::array({2.0, 0.0}),
       {"comm_time_scale_asks[1]", "0", "a positive number"}},
      {"/comm_time_scale_asks", Json::array({"fast"}),
       {"comm_time_scale_asks[0]", "\"fast\"", "a positive number"}},
      {"/gemm/1/k", 0, {"gemm[1].k", "got 0", "> 0"}},
      {"/gemm/0/flops", 1, {"gemm[0].flops", "unknown key"}},
      {"/gemm/0/flops_per_s", 0, {"gemm[0].flops_per_s", "> 0"}},
      {"/collectives/0/op", "broadcast", {"collectives[0].op", "\"broadcast\"", "all_reduce"}},
      {"/collectives/0/link", "pcie", {"collectives[0].link", "\"pcie\"", "intra_node"}},
      {"/collectives/0/ranks", 1, {"collectives[0].ranks", "1", ">= 2"}},
      {"/collectives/0/latency_s", -1e-6, {"collectives[0].latency_s", ">= 0"}},
      {"/collectives/0/bus_bandwidth_bytes_per_s", 0,
       {"collectives[0].bus_bandwidth_bytes_per_s", "> 0"}},
  };
  for (const BadValue& c : cases) {
    SCOPED_TRACE(c.pointer);
    j = profile_json();
    j[Json::json_pointer(c.pointer)] = c.value;
    std::vector<std::string> fragments = c.fragments;
    fragments.push_back("p.json");
    expect_error<ConfigError>([&] { Profile::from_json(j, "p.json"); }, fragments);
  }
}

// AdamW moves 28 bytes a parameter: with host_memory_bytes_per_s = 2e10 measured, the most
// a CPU AdamW rate may claim is 1.2 x 2e10 / 28 = 8.571e8 parameters per second. Above it,
// the file, the key, the value and that bound are named (the rate was timed in cache).
TEST(Profile, AnAdamWRateTheMeasuredMemoryCannotCarryIsRefused) {
  Json j = profile_json();
  j["cpu_adam_params_per_s"] = 8.5e8;  // 8.5e8 x 28 = 2.38e10 <= 2.4e10
  EXPECT_NO_THROW(Profile::from_json(j, "p.json"));
  j["cpu_adam_params_per_s"] = 7.2e9;  // issue 38's cache-resident rate: ~200 GB/s
  expect_error<ConfigError>([&] { Profile::from_json(j, "p.json"); },
                            {"p.json", "cpu_adam_params_per_s", "7.2e+09",
                             "at most 8.571e+08", "host_memory_bytes_per_s"});
  j["backend"] = "cuda";  // the offloaded optimizer of a GPU profile alike
  expect_error<ConfigError>([&] { Profile::from_json(j, "p.json"); },
                            {"p.json", "cpu_adam_params_per_s", "at most 8.571e+08"});
  // No measured memory (every profile before it was recorded): nothing to hold the rate to.
  j = profile_json();
  j["host_memory_bytes_per_s"] = 0;
  j["cpu_adam_params_per_s"] = 7.2e9;
  EXPECT_NO_THROW(Profile::from_json(j, "p.json"));
  j = profile_json();
  j["memory_working_set_bytes"] = -1;
  expect_error<ConfigError>([&] { Profile::from_json(j, "p.json"); },
                            {"p.json", "memory_working_set_bytes", ">= 0"});
}

TEST(Profile, ConventionsAndHeadroomRoundTripAndAreOptional) {
  Json j = profile_json();
  EXPECT_FALSE(Profile::from_json(j, "p.json").conventions.has_value());  // absent: the executor's
  j["conventions"] = megatron_lm_2021_conventions().to_json();
  j["device_headroom"] = Json{{"context_mib", 512.0}, {"communicator_mib", 64.0},
                              {"fragmentation_fraction", 0.05}, {"source", "hand"}};
  const Profile p = Profile::from_json(j, "p.json");
  ASSERT_TRUE(p.conventions.has_value());
  EXPECT_EQ(*p.conventions, megatron_lm_2021_conventions());
  EXPECT_DOUBLE_EQ(p.headroom.context_bytes, 512.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(p.headroom.communicator_bytes, 64.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(p.headroom.fragmentation_fraction, 0.05);
  EXPECT_EQ(Profile::from_json(p.to_json(), "p.json").to_json(), p.to_json());
  // The two named sets differ where the frameworks differ.
  const KernelConventions cuda = executor_conventions(Backend::kCuda);
  EXPECT_EQ(cuda.attention, AttentionKernel::kFlash);
  EXPECT_FALSE(cuda.dropout);
  EXPECT_EQ(executor_conventions(Backend::kCpu).recompute, RecomputeScope::kToGeluOutput);
}

// Llama's operator rates and grouped-query attention samples: read, written back only when
// measured (a profile from before them reads back as written, without the keys), and every
// bad value named with its file and key.
TEST(Profile, LlamaRatesRoundTripAndAreWrittenOnlyWhenMeasured) {
  Json j = profile_json();
  const Profile without = Profile::from_json(j, "p.json");
  EXPECT_EQ(without.rmsnorm_bytes_per_s, 0.0);
  EXPECT_TRUE(without.gqa_attention.empty());
  const Json written = without.to_json();
  for (const char* key : {"rmsnorm_bytes_per_s", "rmsnorm_backward_bytes_per_s",
                          "swiglu_bytes_per_s", "swiglu_backward_bytes_per_s", "rope_bytes_per_s",
                          "rope_backward_bytes_per_s", "gqa_attention"}) {
    EXPECT_FALSE(written.contains(key)) << key;
  }
  EXPECT_EQ(written, j);

  j["rmsnorm_bytes_per_s"] = 6e9;
  j["rmsnorm_backward_bytes_per_s"] = 4e9;
  j["swiglu_bytes_per_s"] = 3e9;
  j["rope_bytes_per_s"] = 2e9;  // backward rates need not be there (a quick calibration)
  j["gqa_attention"] = Json::parse(R"([{"head_size": 64, "flops_per_s": 3e10,
                                        "backward_flops_per_s": 2e10},
                                       {"head_size": 128, "flops_per_s": 4e10}])");
  const Profile p = Profile::from_json(j, "p.json");
  EXPECT_DOUBLE_EQ(p.rmsnorm_backward_bytes_per_s, 4e9);
  EXPECT_EQ(p.swiglu_backward_bytes_per_s, 0.0);
  ASSERT_EQ(p.gqa_attention.size(), 2u);
  EXPECT_EQ(p.gqa_attention[1].head_size, 128);
  EXPECT_DOUBLE_EQ(p.gqa_attention[0].backward_flops_per_s, 2e10);
  EXPECT_EQ(p.gqa_attention[1].backward_flops_per_s, 0.0);
  EXPECT_EQ(p.to_json(), j);  // the unmeasured backward rates stay out

  struct BadValue {
    const char* pointer;
    Json value;
    std::vector<std::string> fragments;
  };
  const std::vector<BadValue> cases = {
      {"/swiglu_bytes_per_s", -3, {"swiglu_bytes_per_s", "-3", ">= 0"}},
      {"/rope_backward_bytes_per_s", 0.5, {"rope_backward_bytes_per_s", "0.5", "a rate >= 1"}},
      {"/gqa_attention", "fast", {"gqa_attention"}},
      {"/gqa_attention/0/head_size", 0, {"gqa_attention[0].head_size", "> 0"}},
      {"/gqa_attention/1/flops_per_s", 0, {"gqa_attention[1].flops_per_s", "> 0"}},
      {"/gqa_attention/0/backward_flops_per_s", -1,
       {"gqa_attention[0].backward_flops_per_s", ">= 0"}},
      {"/gqa_attention/1/heads", 8, {"gqa_attention[1].heads", "unknown key"}},
      {"/gqa_attention/1/head_size", 64,
       {"gqa_attention[1].head_size", "64", "a head size no other sample has"}},
  };
  for (const BadValue& c : cases) {
    SCOPED_TRACE(c.pointer);
    Json bad = j;
    bad[Json::json_pointer(c.pointer)] = c.value;
    std::vector<std::string> fragments = c.fragments;
    fragments.push_back("p.json");
    expect_error<ConfigError>([&] { Profile::from_json(bad, "p.json"); }, fragments);
  }
}

TEST(Profile, BadConventionsAndHeadroomNameFileAndKey) {
  Json j = profile_json();
  j["conventions"] = megatron_lm_2021_conventions().to_json();
  j["conventions"]["attention"] = "paged";
  expect_error<ConfigError>([&] { Profile::from_json(j, "p.json"); }, {"p.json", "conventions.attention", "paged"});
  j["conventions"] = megatron_lm_2021_conventions().to_json();
  j["conventions"].erase("dropout");
  expect_error<ConfigError>([&] { Profile::from_json(j, "p.json"); }, {"p.json", "conventions.dropout"});
  j["conventions"] = megatron_lm_2021_conventions().to_json();
  j["device_headroom"] = Json{{"context_mib", 512.0}, {"communicator_mib", 64.0},
                              {"fragmentation_fraction", 1.5}, {"source", "hand"}};
  expect_error<ConfigError>([&] { Profile::from_json(j, "p.json"); },
               {"p.json", "device_headroom.fragmentation_fraction", "1.5"});
  j["device_headroom"]["fragmentation_fraction"] = 0.05;
  j["device_headroom"]["context_mib"] = -1.0;
  expect_error<ConfigError>([&] { Profile::from_json(j, "p.json"); }, {"p.json", "device_headroom.context_mib"});
}

}  // namespace
}  // namespace strata
