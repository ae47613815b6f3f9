// What `strata run` says after its report: the prediction beside the measurement, and
// --update-profile's fold of the run into a profile (run_common.h).
#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "cost_model/pricing/compute_model.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/pricing/profile_feedback.h"
#include "cost_model/pricing/time_model.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"
#include "tools/strata/run_common.h"

namespace strata::cli {

// The measured step time and offload bytes beside the cost model's for the same plan: with
// the chosen profile's rates (profile_choice.h), else the cluster file's.
void print_predicted(const Validated& v, const StepReport& rep, std::ostream& out) {
  double predicted_s = 0;
  try {
    predicted_s = predict(v.model, v.cluster, v.train, v.plan, v.profile.get()).step_time_s;
  } catch (const InfeasiblePlan& e) {
    out << fmt::format("no prediction for this plan on cluster {}: {}\n", v.cluster.name, e.what());
  }
  if (predicted_s > 0) {
    out << fmt::format("step time {:.4f} s measured, {:.4f} s predicted by the cost model "
                       "(cluster {}, {})\n", rep.step_time_s, predicted_s, v.cluster.name,
                       v.profile ? "profile " + v.profile.name : std::string("no profile"));
  }
  if (rep.transfers.empty()) return;
  TransferBytes want;
  for (std::int64_t r = 0; r < v.plan.pp; ++r) {
    const TransferBytes t = offload_transfer_bytes(v.model, v.plan, v.train, r);
    want.device_to_host = std::max(want.device_to_host, t.device_to_host);
    want.host_to_device = std::max(want.host_to_device, t.host_to_device);
    want.host_to_nvme = std::max(want.host_to_nvme, t.host_to_nvme);
    want.nvme_to_host = std::max(want.nvme_to_host, t.nvme_to_host);
  }
  const TransferBytes& got = rep.transfers;
  out << fmt::format("offload bytes per step (worst rank), measured / predicted: device->host "
                     "{:.0f} / {:.0f}, host->device {:.0f} / {:.0f}, host->nvme {:.0f} / {:.0f}, "
                     "nvme->host {:.0f} / {:.0f}\n",
                     got.device_to_host, want.device_to_host, got.host_to_device,
                     want.host_to_device, got.host_to_nvme, want.host_to_nvme, got.nvme_to_host,
                     want.nvme_to_host);
}

// --update-profile: the run's report against the prediction with the same profile, folded
// into the profile's compute_time_scale and comm_time_scale (profile_feedback.h) and written
// back atomically. Rank 0 only, after the report is written.
void update_profile(const std::string& path, const Validated& v, const StepReport& measured,
                    std::ostream& out) {
  Profile profile = Profile::load(path);
  // On the CPU backend a rank keeps threads_per_rank cores busy; a GPU rank, one GPU.
  const std::int64_t threads =
      v.cluster.backend == Backend::kCpu ? std::max<std::int64_t>(profile.threads_per_rank, 1) : 1;
  RunPlacement placement;
  placement.busy_cores = plan_ranks_per_node(v.plan, v.cluster) * threads;
  placement.node_cores =
      v.cluster.backend == Backend::kCpu ? v.cluster.host.cpu_cores : v.cluster.gpus_per_node;
  const FeedbackFit fit =
      fold_run_into_profile(profile, measured, placement, [&](const Profile& p) {
        return predict(v.model, v.cluster, v.train, v.plan, &p);
      });
  write_json_file(path, profile.to_json());
  std::string fitted;
  for (const auto& [name, u] : {std::pair{"compute_time_scale", fit.compute},
                                std::pair{"comm_time_scale", fit.comm},
                                std::pair{"busy_cores_slowdown", fit.busy_cores},
                                std::pair{"time_sliced_sync_s", fit.time_sliced}}) {
    if (!u.fitted) continue;
    fitted += fmt::format("{}{} {:.4g} -> {:.4g} (this run asks for {:.4g}; trimmed mean of {} runs)",
                          fitted.empty() ? "" : "; ", name, u.old_scale, u.new_scale,
                          u.run_scale, u.runs);
  }
  out << fmt::format("updated {} (step measured {:.4f} s, predicted {:.4f} s): {}\n", path,
                     fit.measured_step_s, fit.predicted_step_s, fitted);
}

}  // namespace strata::cli
