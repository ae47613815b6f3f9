// Gathering ranks' measurements and building the RunReport and trace (see run_report.h).
#include "executor/report/run_report.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "cost_model/pricing/compute_model.h"
#include "cost_model/pricing/inter_node_share.h"
#include "cost_model/specs/units.h"
#include "executor/comm/mpi_check.h"

namespace strata::report {
namespace {

Json parts_json(const StepTimeParts& p) {
  return Json{{"forward_s", p.forward_s},     {"backward_s", p.backward_s},
              {"recompute_s", p.recompute_s}, {"tp_comm_s", p.tp_comm_s},
              {"pp_comm_s", p.pp_comm_s},     {"dp_comm_s", p.dp_comm_s},
              {"offload_s", p.offload_s},     {"optimizer_s", p.optimizer_s},
              {"bubble_s", p.bubble_s},       {"other_s", p.other_s}};
}
StepTimeParts parts_from(const Json& j) {
  StepTimeParts p;
  p.forward_s = j.at("forward_s");
  p.backward_s = j.at("backward_s");
  p.recompute_s = j.at("recompute_s");
  p.tp_comm_s = j.at("tp_comm_s");
  p.pp_comm_s = j.at("pp_comm_s");
  p.dp_comm_s = j.at("dp_comm_s");
  p.offload_s = j.at("offload_s");
  p.optimizer_s = j.at("optimizer_s");
  p.bubble_s = j.at("bubble_s");
  p.other_s = j.at("other_s");
  return p;
}
MemoryTier tier_from(const std::string& s) {
  if (s == "host") return MemoryTier::kHost;
  if (s == "nvme") return MemoryTier::kNvme;
  return MemoryTier::kDevice;
}

// The index of the median step among steps[skip..] (by step time).
std::size_t median_step(const std::vector<StepSample>& steps) {
  const std::size_t skip = steps.size() > 1 ? 1 : 0;
  std::vector<std::size_t> order;
  for (std::size_t i = skip; i < steps.size(); ++i) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return steps[a].step_s < steps[b].step_s || (steps[a].step_s == steps[b].step_s && a < b);
  });
  return order[(order.size() - 1) / 2];
}

}  // namespace

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[(values.size() - 1) / 2];
}

Json RankSummary::to_json() const {
  Json j;
  j["rank"] = rank;
  j["coords"] = {coords.tp, coords.dp, coords.pp};
  j["peak_bytes"] = {peak_bytes.device, peak_bytes.host, peak_bytes.nvme};
  j["tags"] = Json::array();
  for (const auto& t : tags) {
    j["tags"].push_back({{"tag", t.tag}, {"tier", std::string(to_string(t.tier))},
                         {"peak_bytes", t.peak_bytes}, {"at_tier_peak_bytes", t.at_tier_peak_bytes}});
  }
  j["steps"] = Json::array();
  for (const auto& s : steps) j["steps"].push_back({{"step_s", s.step_s}, {"parts", parts_json(s.parts)}});
  j["kernel_threads"] = kernel_threads;
  j["trace"] = Json::array();
  for (const auto& e : trace) {
    j["trace"].push_back({{"name", e.name}, {"cat", e.category}, {"tid", e.tid},
                          {"start_s", e.start_s}, {"duration_s", e.duration_s}, {"args", e.args}});
  }
  return j;
}

RankSummary RankSummary::from_json(const Json& j) {
  RankSummary r;
  r.rank = j.at("rank");
  r.coords = RankCoords{j.at("coords")[0], j.at("coords")[1], j.at("coords")[2]};
  r.peak_bytes = TierBytes{j.at("peak_bytes")[0], j.at("peak_bytes")[1], j.at("peak_bytes")[2]};
  for (const auto& t : j.at("tags")) {
    TagUsage u;
    u.tag = t.at("tag");
    u.tier = tier_from(t.at("tier"));
    u.peak_bytes = t.at("peak_bytes");
    u.at_tier_peak_bytes = t.at("at_tier_peak_bytes");
    r.tags.push_back(u);
  }
  for (const auto& s : j.at("steps")) r.steps.push_back({s.at("step_s"), parts_from(s.at("parts"))});
  r.kernel_threads = j.at("kernel_threads");
  for (const auto& e : j.at("trace")) {
    TraceEvent ev;
    ev.name = e.at("name");
    ev.category = e.at("cat");
    ev.tid = e.at("tid");
    ev.start_s = e.at("start_s");
    ev.duration_s = e.at("duration_s");
    ev.args = e.at("args");
    r.trace.push_back(std::move(ev));
  }
  return r;
}

RankSummary summarize_rank(const ProcessGroups& groups, const AccountingAllocator& alloc,
                           std::vector<StepSample> steps, std::vector<TraceEvent> trace) {
  RankSummary r;
  r.rank = groups.world_rank();
  r.coords = groups.coords();
  r.peak_bytes = alloc.peak_bytes();
  r.tags = alloc.tags();
  r.steps = std::move(steps);
  r.trace = std::move(trace);
  r.kernel_threads = omp_get_max_threads();
  return r;
}

std::vector<RankSummary> gather_summaries(const MpiCommunicator& world, const RankSummary& mine) {
  const std::string text = mine.to_json().dump();
  int length = static_cast<int>(text.size());
  const int size = world.size();
  std::vector<int> lengths(static_cast<std::size_t>(size));
  {
    const CommWatch::Scope watched = world.blocking(CommCall::kGather);
    MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, world.handle()));
  }
  std::vector<int> offsets(static_cast<std::size_t>(size), 0);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += lengths[static_cast<std::size_t>(r)];
  }
  std::string all(world.rank() == 0 ? static_cast<std::size_t>(total) : 0, '\0');
  {
    const CommWatch::Scope watched = world.blocking(CommCall::kGatherv);
    MPI_CHECK(MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(),
                          offsets.data(), MPI_CHAR, 0, world.handle()));
  }
  std::vector<RankSummary> out;
  if (world.rank() != 0) return out;
  for (int r = 0; r < size; ++r) {
    out.push_back(RankSummary::from_json(Json::parse(
        all.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]),
                   static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)])))));
  }
  return out;
}

StepReport build_run_report(const ModelSpec& model, const ClusterSpec& cluster,
                            const TrainSpec& train, const Plan& plan, const Profile* profile,
                            const std::vector<RankSummary>& ranks,
                            const std::vector<double>& losses) {
  StepReport r;
  r.kind = "measurement";
  r.plan_label = plan.label();
  const RankSummary* slowest = nullptr;
  std::size_t slowest_step = 0;
  for (const auto& rank : ranks) {
    if (rank.steps.empty()) continue;
    const std::size_t i = median_step(rank.steps);
    if (slowest == nullptr || rank.steps[i].step_s > slowest->steps[slowest_step].step_s) {
      slowest = &rank;
      slowest_step = i;
    }
  }
  if (slowest != nullptr) {
    r.step_time_s = slowest->steps[slowest_step].step_s;
    r.parts = slowest->steps[slowest_step].parts;
    r.steps_measured = static_cast<std::int64_t>(slowest->steps.size() > 1 ? slowest->steps.size() - 1 : 1);
  }
  const double tokens = static_cast<double>(train.global_batch) * static_cast<double>(model.seq_len);
  if (r.step_time_s > 0) {
    r.tokens_per_s = tokens / r.step_time_s;
    const double flops_per_rank = hardware_flops(model, train.global_batch, plan.recompute) /
                                  static_cast<double>(plan.world_size()) / r.step_time_s;
    r.tflops_per_gpu = flops_per_rank / units::kTera;
    std::int64_t threads = 1;
    for (const auto& rank : ranks) threads = std::max(threads, rank.kernel_threads);
    const double peak = mfu_peak_flops(
        cluster, train, profile,
        mfu_cores_per_rank(cluster, plan_ranks_per_node(plan, cluster), threads));
    const double mfu_flops_per_rank = model_flops_without_recompute(model, train.global_batch) /
                                      static_cast<double>(plan.world_size()) / r.step_time_s;
    r.model_tflops_per_gpu = mfu_flops_per_rank / units::kTera;
    r.mfu = peak > 0 ? mfu_flops_per_rank / peak : 0;
    r.bubble_fraction = r.parts.bubble_s / r.step_time_s;
  }
  for (const auto& rank : ranks) {
    r.per_rank.push_back(RankMemory{rank.rank, rank.coords.pp, rank.peak_bytes,
                                    memory_by_kind(rank.tags), 0});
    r.memory_bytes.device = std::max(r.memory_bytes.device, rank.peak_bytes.device);
    r.memory_bytes.host = std::max(r.memory_bytes.host, rank.peak_bytes.host);
    r.memory_bytes.nvme = std::max(r.memory_bytes.nvme, rank.peak_bytes.nvme);
  }
  // Measured parts classed by the same rule as the prediction's, so compare sets them side by side.
  r.inter_node_comm_s = inter_node_comm_s(r.parts, plan, cluster);
  r.losses = losses;
  return r;
}

ChromeTrace build_run_trace(const std::vector<RankSummary>& ranks) {
  ChromeTrace trace;
  for (const auto& rank : ranks) {
    const std::int64_t pid = rank.rank;
    const std::int64_t pp = rank.coords.pp;
    trace.process_names[pid] =
        fmt::format("rank {} (tp {}, dp {}, pp {})", rank.rank, rank.coords.tp, rank.coords.dp, pp);
    trace.thread_names[{pid, compute_tid(pp)}] = fmt::format("pp_rank {} compute", pp);
    trace.thread_names[{pid, p2p_tid(pp)}] = fmt::format("pp_rank {} p2p", pp);
    for (TraceEvent e : rank.trace) {
      e.pid = pid;
      // Every track a step used, by its stream (the host stream: the CPU optimizer's thread).
      const auto stream = static_cast<Stream>(e.tid % kStreamCount);
      trace.thread_names.try_emplace({pid, e.tid}, fmt::format("pp_rank {} {}", pp, to_string(stream)));
      trace.events.push_back(std::move(e));
    }
  }
  return trace;
}

MemoryByKind memory_by_kind(const std::vector<TagUsage>& tags) {
  MemoryByKind b;
  for (const TagUsage& t : tags) {
    const std::string_view tier = to_string(t.tier);
    TierBytes& bytes = b[memory_kind_of_tag(t.tag, tier)];
    const auto at_peak = static_cast<double>(t.at_tier_peak_bytes);
    if (t.tier == MemoryTier::kDevice) bytes.device += at_peak;
    if (t.tier == MemoryTier::kHost) bytes.host += at_peak;
    if (t.tier == MemoryTier::kNvme) bytes.nvme += at_peak;
  }
  return b;
}

Json memory_tags_json(const std::vector<RankSummary>& ranks) {
  Json out{{"ranks", Json::array()}};
  for (const auto& rank : ranks) {
    Json tags = Json::array();
    for (const auto& t : rank.tags) {
      tags.push_back({{"tag", t.tag}, {"tier", std::string(to_string(t.tier))},
                      {"kind", std::string(to_string(memory_kind_of_tag(t.tag, to_string(t.tier))))},
                      {"peak_bytes", t.peak_bytes}, {"at_tier_peak_bytes", t.at_tier_peak_bytes}});
    }
    const MemoryByKind kinds = memory_by_kind(rank.tags);
    Json by_kind = Json::object();
    for (const MemoryKind k : kMemoryKinds) {
      by_kind[std::string(to_string(k))] = {
          {"device", kinds[k].device}, {"host", kinds[k].host}, {"nvme", kinds[k].nvme}};
    }
    out["ranks"].push_back({{"rank", rank.rank}, {"pp_rank", rank.coords.pp},
                            {"by_kind", by_kind}, {"tags", tags}});
  }
  return out;
}

}  // namespace strata::report
