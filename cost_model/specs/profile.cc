// Profile reading and writing; see profile.h. Keys are the field names, already in SI
// (_bytes_per_s, _flops_per_s, _s). The scalar rates are optional (absent = 0 = "not
// measured, use the ClusterSpec's curve"), because a calibration run may measure only some
// of them; machine and backend are required. Does not measure anything (tools/ does) and
// does not interpolate the GEMM table (the time model does).
#include "cost_model/specs/profile.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/limits.h"
#include "cost_model/specs/units.h"

namespace strata {
namespace {

// The optional scalar rates, in struct order, with their JSON keys. Rates calibrate has
// measured from the start are always written; those added later (written_when_zero false)
// only when measured, so that a profile recorded before them reads back as written.
struct RateField {
  const char* key;
  double Profile::*field;
  bool written_when_zero = true;
};
constexpr RateField kRates[] = {
    {"elementwise_bytes_per_s", &Profile::elementwise_bytes_per_s},
    {"attention_flops_per_s", &Profile::attention_flops_per_s},
    {"attention_backward_flops_per_s", &Profile::attention_backward_flops_per_s},
    {"elementwise_backward_bytes_per_s", &Profile::elementwise_backward_bytes_per_s},
    {"rmsnorm_bytes_per_s", &Profile::rmsnorm_bytes_per_s, false},
    {"rmsnorm_backward_bytes_per_s", &Profile::rmsnorm_backward_bytes_per_s, false},
    {"swiglu_bytes_per_s", &Profile::swiglu_bytes_per_s, false},
    {"swiglu_backward_bytes_per_s", &Profile::swiglu_backward_bytes_per_s, false},
    {"rope_bytes_per_s", &Profile::rope_bytes_per_s, false},
    {"rope_backward_bytes_per_s", &Profile::rope_backward_bytes_per_s, false},
    {"host_to_device_bytes_per_s", &Profile::host_to_device_bytes_per_s},
    {"device_to_host_bytes_per_s", &Profile::device_to_host_bytes_per_s},
    {"nvme_read_bytes_per_s", &Profile::nvme_read_bytes_per_s},
    {"nvme_write_bytes_per_s", &Profile::nvme_write_bytes_per_s},
    {"cpu_adam_params_per_s", &Profile::cpu_adam_params_per_s},
    {"device_adam_params_per_s", &Profile::device_adam_params_per_s},
    {"host_memory_bytes_per_s", &Profile::host_memory_bytes_per_s, false},
    {"op_overhead_s", &Profile::op_overhead_s},
};

// The factors measured runs fold in (profile_feedback.h), each with what the runs asked for.
struct FeedbackField {
  const char* key;
  const char* asks_key;
  double Profile::*value;
  std::vector<double> Profile::*asks;
};
constexpr FeedbackField kFeedback[] = {
    {"busy_cores_slowdown", "busy_cores_slowdown_asks", &Profile::busy_cores_slowdown,
     &Profile::busy_cores_slowdown_asks},
    {"time_sliced_sync_s", "time_sliced_sync_asks", &Profile::time_sliced_sync_s,
     &Profile::time_sliced_sync_asks},
    {"compute_time_scale", "compute_time_scale_asks", &Profile::compute_time_scale,
     &Profile::compute_time_scale_asks},
    {"comm_time_scale", "comm_time_scale_asks", &Profile::comm_time_scale,
     &Profile::comm_time_scale_asks},
};

// A measured rate: 0 (not measured, where the key allows it) or in [1, 1e18] per second, so
// that work / rate stays finite and meaningful.
void require_rate(const JsonObjectReader& r, const std::string& key, double rate) {
  if (rate != 0 && rate < limits::kMinRatePerS) {
    r.fail(key, fmt::format("{}", rate), fmt::format("0 or a rate >= {} per second",
                                                     limits::kMinRatePerS));
  }
  r.require_at_most(key, rate, limits::kRatePerS);
}

// The CPU AdamW rate the measured host memory can carry (kCpuAdamBytesPerParam). Only that
// rate: calibrate times it alternated with the bandwidth on the same arrays, so noise hits
// both alike; device_adam_params_per_s (the CPU backend's at one rank's threads) is timed
// apart on those arrays, and at one thread against a two-thread bandwidth on a busy 2-core
// VM it came out 1.22x that bandwidth's 28-byte share in a quick (in-cache) run.
void require_adam_within_memory(const JsonObjectReader& r, const Profile& p) {
  if (p.host_memory_bytes_per_s <= 0) return;
  const double most = kAdamOverMemoryTolerance * p.host_memory_bytes_per_s / kCpuAdamBytesPerParam;
  if (p.cpu_adam_params_per_s <= most) return;
  r.fail("cpu_adam_params_per_s", fmt::format("{:.4g}", p.cpu_adam_params_per_s),
         fmt::format("at most {:.4g} parameters per second ({} x host_memory_bytes_per_s {:.4g} "
                     "/ {} bytes a parameter); a faster rate was timed on arrays the cache "
                     "held: calibrate again", most, kAdamOverMemoryTolerance,
                     p.host_memory_bytes_per_s, kCpuAdamBytesPerParam));
}

GemmSample gemm_from_json(JsonObjectReader r) {
  GemmSample g;
  for (auto [key, field] : {std::pair{"m", &GemmSample::m}, std::pair{"n", &GemmSample::n},
                            std::pair{"k", &GemmSample::k}}) {
    g.*field = r.get_int(key);
    r.require_positive(key, static_cast<double>(g.*field));
    r.require_at_most(key, static_cast<double>(g.*field), limits::kGemmDim);
  }
  g.flops_per_s = r.get_number("flops_per_s");
  r.require_positive("flops_per_s", g.flops_per_s);
  require_rate(r, "flops_per_s", g.flops_per_s);
  r.finish();
  return g;
}

AttentionSample attention_sample_from_json(JsonObjectReader r) {
  AttentionSample a;
  a.head_size = r.get_int("head_size");
  r.require_positive("head_size", static_cast<double>(a.head_size));
  r.require_at_most("head_size", static_cast<double>(a.head_size), limits::kHidden);
  a.flops_per_s = r.get_number("flops_per_s");
  r.require_positive("flops_per_s", a.flops_per_s);
  require_rate(r, "flops_per_s", a.flops_per_s);
  a.backward_flops_per_s = r.get_number_or("backward_flops_per_s", 0.0);
  r.require_non_negative("backward_flops_per_s", a.backward_flops_per_s);
  require_rate(r, "backward_flops_per_s", a.backward_flops_per_s);
  r.finish();
  return a;
}

CollectiveFit collective_from_json(JsonObjectReader r) {
  CollectiveFit c;
  c.op = r.get_enum("op", {"all_reduce", "reduce_scatter", "all_gather", "p2p"});
  c.link = r.get_enum("link", {"intra_node", "inter_node"});
  c.ranks = r.get_int("ranks");
  // A collective or a point-to-point transfer needs at least two ranks.
  if (c.ranks < 2) r.fail("ranks", std::to_string(c.ranks), "an integer >= 2");
  r.require_at_most("ranks", static_cast<double>(c.ranks), limits::kRanks);
  c.latency_s = r.get_number("latency_s");
  r.require_non_negative("latency_s", c.latency_s);
  r.require_at_most("latency_s", c.latency_s, limits::kSeconds);
  c.bus_bandwidth_bytes_per_s = r.get_number("bus_bandwidth_bytes_per_s");
  r.require_positive("bus_bandwidth_bytes_per_s", c.bus_bandwidth_bytes_per_s);
  require_rate(r, "bus_bandwidth_bytes_per_s", c.bus_bandwidth_bytes_per_s);
  r.finish();
  return c;
}

}  // namespace

Profile Profile::from_json(const Json& json, const std::string& source) {
  JsonObjectReader r(json, source);
  Profile p;
  p.machine = r.get_string("machine");
  p.backend = r.get_enum("backend", {"cpu", "cuda"});
  const Json& gemm = r.get_array("gemm");
  for (std::size_t i = 0; i < gemm.size(); ++i) {
    p.gemm.push_back(
        gemm_from_json(JsonObjectReader(gemm[i], source, fmt::format("gemm[{}]", i))));
  }
  for (const RateField& f : kRates) {
    p.*f.field = r.get_number_or(f.key, 0.0);
    r.require_non_negative(f.key, p.*f.field);
    if (f.field == &Profile::op_overhead_s) {
      r.require_at_most(f.key, p.*f.field, limits::kSeconds);
    } else {
      require_rate(r, f.key, p.*f.field);
    }
  }
  require_adam_within_memory(r, p);
  if (r.has("gqa_attention")) {
    const Json& gqa = r.get_array("gqa_attention");
    for (std::size_t i = 0; i < gqa.size(); ++i) {
      const std::string where = fmt::format("gqa_attention[{}]", i);
      p.gqa_attention.push_back(attention_sample_from_json(JsonObjectReader(gqa[i], source, where)));
      // One sample a head size: the time model picks by head size, and two would leave the
      // choice to their order.
      for (std::size_t j = 0; j < i; ++j) {
        if (p.gqa_attention[j].head_size == p.gqa_attention[i].head_size) {
          r.fail(where + ".head_size", std::to_string(p.gqa_attention[i].head_size),
                 fmt::format("a head size no other sample has (gqa_attention[{}] has it)", j));
        }
      }
    }
  }
  for (auto [key, field] :
       {std::pair{"memory_working_set_bytes", &Profile::memory_working_set_bytes},
        std::pair{"last_level_cache_bytes", &Profile::last_level_cache_bytes}}) {
    p.*field = r.get_int_or(key, 0);
    r.require_non_negative(key, static_cast<double>(p.*field));
    r.require_at_most(key, static_cast<double>(p.*field), limits::kProfileBytes);
  }
  p.threads_per_rank = r.get_int_or("threads_per_rank", 0);
  r.require_non_negative("threads_per_rank", static_cast<double>(p.threads_per_rank));
  r.require_at_most("threads_per_rank", static_cast<double>(p.threads_per_rank), limits::kCpuCores);
  p.busy_cores = r.get_int_or("busy_cores", 0);
  r.require_non_negative("busy_cores", static_cast<double>(p.busy_cores));
  r.require_at_most("busy_cores", static_cast<double>(p.busy_cores), limits::kRanks);
  for (const FeedbackField& f : kFeedback) {
    p.*f.value = r.get_number_or(f.key, 0.0);
    r.require_non_negative(f.key, p.*f.value);
    r.require_at_most(f.key, p.*f.value,
                      f.value == &Profile::time_sliced_sync_s ? limits::kSeconds : limits::kScale);
    if (!r.has(f.asks_key)) continue;
    const Json& asks = r.get_array(f.asks_key);
    for (std::size_t i = 0; i < asks.size(); ++i) {
      const std::string key = fmt::format("{}[{}]", f.asks_key, i);
      if (!asks[i].is_number() || !(asks[i].get<double>() > 0) ||
          !(asks[i].get<double>() <= limits::kScale)) {
        r.fail(key, asks[i].dump(), fmt::format("a positive number <= {}", limits::kScale));
      }
      (p.*f.asks).push_back(asks[i].get<double>());
    }
  }
  const Json& collectives = r.get_array("collectives");
  for (std::size_t i = 0; i < collectives.size(); ++i) {
    p.collectives.push_back(collective_from_json(
        JsonObjectReader(collectives[i], source, fmt::format("collectives[{}]", i))));
  }
  if (r.has("conventions")) p.conventions = KernelConventions::from_json(r.get_object("conventions"));
  if (r.has("device_headroom")) p.headroom = device_headroom_from_json(r.get_object("device_headroom"));
  r.finish();
  return p;
}

Profile Profile::load(const std::string& path) { return from_json(read_json_file(path), path); }

Json Profile::to_json() const {
  Json j = Json::object();
  j["machine"] = machine;
  j["backend"] = backend;
  Json g = Json::array();
  for (const GemmSample& s : gemm) {
    g.push_back(Json{{"m", s.m}, {"n", s.n}, {"k", s.k}, {"flops_per_s", s.flops_per_s}});
  }
  j["gemm"] = g;
  for (const RateField& f : kRates) {
    if (f.written_when_zero || this->*f.field != 0) j[f.key] = this->*f.field;
  }
  if (!gqa_attention.empty()) {
    Json a = Json::array();
    for (const AttentionSample& s : gqa_attention) {
      Json sample{{"head_size", s.head_size}, {"flops_per_s", s.flops_per_s}};
      if (s.backward_flops_per_s != 0) sample["backward_flops_per_s"] = s.backward_flops_per_s;
      a.push_back(sample);
    }
    j["gqa_attention"] = a;
  }
  // Measured by calibrate since the out-of-cache rates; profiles recorded before carry none
  // of the three and must read back as written, so unmeasured (0) is left out.
  if (memory_working_set_bytes != 0) j["memory_working_set_bytes"] = memory_working_set_bytes;
  if (last_level_cache_bytes != 0) j["last_level_cache_bytes"] = last_level_cache_bytes;
  j["threads_per_rank"] = threads_per_rank;
  j["busy_cores"] = busy_cores;
  for (const FeedbackField& f : kFeedback) {
    j[f.key] = this->*f.value;
    j[f.asks_key] = this->*f.asks;
  }
  Json c = Json::array();
  for (const CollectiveFit& f : collectives) {
    c.push_back(Json{{"op", f.op},
                     {"link", f.link},
                     {"ranks", f.ranks},
                     {"latency_s", f.latency_s},
                     {"bus_bandwidth_bytes_per_s", f.bus_bandwidth_bytes_per_s}});
  }
  j["collectives"] = c;
  if (conventions) j["conventions"] = conventions->to_json();
  if (headroom.any() || !headroom.source.empty()) {
    j["device_headroom"] = strata::to_json(headroom);
  }
  return j;
}

}  // namespace strata
