// The measured RunReport (a StepReport of kind "measurement") and the Chrome trace of a
// `strata run`: every rank summarises what it measured (step times and their parts, peak
// bytes per tier and per allocation tag, the trace events of its last step), the summaries
// are gathered to rank 0, and rank 0 builds the report, the trace and a per-tag memory table
// (for aligning the executor's peaks with the memory model's terms).
// Deliberately not here: printing, writing files (the CLI does that), timing itself (the
// engine measures).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/program/chrome_trace.h"
#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/profile.h"
#include "cost_model/specs/step_report.h"
#include "cost_model/specs/train_spec.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/comm/process_groups.h"
#include "executor/memory/accounting_allocator.h"

namespace strata::report {

struct StepSample {
  double step_s = 0;
  StepTimeParts parts;
};

// What one rank measured over a run.
struct RankSummary {
  std::int64_t rank = 0;
  RankCoords coords;
  TierBytes peak_bytes;
  std::vector<TagUsage> tags;
  std::vector<StepSample> steps;
  std::vector<TraceEvent> trace;  // one step's events (pid/tid filled by the trace builder)
  std::int64_t kernel_threads = 1;  // the rank's OpenMP threads (CPU kernels; MFU's peak)

  Json to_json() const;
  static RankSummary from_json(const Json& json);
};

RankSummary summarize_rank(const ProcessGroups& groups, const AccountingAllocator& alloc,
                           std::vector<StepSample> steps, std::vector<TraceEvent> trace);

// Collective over world: rank 0 receives every rank's summary in rank order; other ranks get
// an empty vector. MPI failures throw SystemError.
std::vector<RankSummary> gather_summaries(const MpiCommunicator& world, const RankSummary& mine);

// The step time is the slowest rank's median step (the first step is a warm-up and is
// skipped when there are more), its parts those of that median step; memory per tier is
// the worst rank's peak; TFLOP/s per rank from megatron_model_flops; MFU against
// mfu_peak_flops (the cluster device's peak, or the profile's best measured GEMM when higher,
// times the cores a rank's kernel_threads keep busy: mfu_cores_per_rank).
StepReport build_run_report(const ModelSpec& model, const ClusterSpec& cluster,
                            const TrainSpec& train, const Plan& plan, const Profile* profile,
                            const std::vector<RankSummary>& ranks,
                            const std::vector<double>& losses);

// pid = global rank (named "rank w (tp a, dp b, pp c)"), tid = compute_tid / p2p_tid of the
// rank's pipeline rank, the convention of cost_model/program/chrome_trace.h.
ChromeTrace build_run_trace(const std::vector<RankSummary>& ranks);

// A rank's tier peaks by kind (cost_model/specs/memory_kinds.h): each tag's bytes at its tier's
// peak, added up under the tag's kind.
MemoryByKind memory_by_kind(const std::vector<TagUsage>& tags);

// {"ranks": [{"rank", "pp_rank", "by_kind": {"params": {"device", "host", "nvme"}, ...},
//   "tags": [{"tag", "tier", "kind", "peak_bytes" (the tag's own peak),
//   "at_tier_peak_bytes" (its bytes at the tier's peak)}...]}...]}.
Json memory_tags_json(const std::vector<RankSummary>& ranks);

// The median of `values` (the lower middle for an even count); 0 when empty.
double median(std::vector<double> values);

}  // namespace strata::report
