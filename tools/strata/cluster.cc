// `strata cluster --describe FILE`: what the cost model will assume of a cluster, after
// --nodes / --gpus-per-node: the shape, each GPU's figures, each node's shared figures and
// every GPU's share of them, the links per GPU and direction, the memory tiers plans may use,
// the device headroom reserved, and the profile whose measured rates replace the file's.
// Nothing is computed here that the cost model does not compute the same way: the shares
// are the node's figure over its GPUs, as time_model.cc and planner.cc divide them.
#include <CLI/CLI.hpp>
#include <memory>
#include <ostream>
#include <vector>

#include <fmt/format.h>

#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/units.h"
#include "tools/strata/commands.h"
#include "tools/strata/inputs.h"

namespace strata::cli {
namespace {

struct ClusterOptions {
  std::string describe;
  ClusterShape shape;
  ProfileFlags profile;
};

std::string source_note(const std::string& source) {
  return source.empty() ? "" : fmt::format("\n    source: {}", source);
}

// The headroom every prediction on this cluster reserves (cost_model.h: device_headroom_for).
void print_headroom(std::ostream& out, const ClusterSpec& c, const ProfileChoice& profile) {
  const HeadroomChoice choice = device_headroom_for(c, profile.get());
  const DeviceHeadroom& h = choice.headroom;
  if (!h.any()) {
    out << fmt::format("device headroom ({}): none reserved: a plan may fill the device to the "
                       "byte{}\n", choice.whose, source_note(h.source));
    return;
  }
  out << fmt::format("device headroom ({}): {:.0f} MiB context + {:.0f} MiB per communicator + "
                     "{:.1f}% fragmentation of the allocated bytes{}\n",
                     choice.whose, h.context_bytes / units::kMiB, h.communicator_bytes / units::kMiB,
                     100.0 * h.fragmentation_fraction, source_note(h.source));
}

void describe(std::ostream& out, const ClusterSpec& c, const ProfileChoice& profile) {
  const double gpus = static_cast<double>(c.gpus_per_node);
  out << fmt::format("cluster {} ({} backend): {} x {} = {}\n", c.name, to_string(c.backend),
                     plural(c.nodes, "node"), plural(c.gpus_per_node, "GPU"),
                     plural(c.total_gpus(), "GPU"));
  out << fmt::format("per GPU ({}): {} memory, {} TFLOP/s bf16, {} TFLOP/s fp32, {} GB/s "
                     "memory bandwidth{}\n",
                     c.device.name, bytes_label(c.device.memory_bytes),
                     readable(c.device.bf16_flops / units::kTera),
                     readable(c.device.fp32_flops / units::kTera),
                     readable(c.device.memory_bandwidth_bytes_per_s / units::kGB),
                     source_note(c.device.source));
  out << fmt::format("per node (host): {} memory, {} CPU cores, {} GFLOP/s fp32, {} GB/s DRAM; "
                     "per GPU: {} memory, {} cores; PCIe {} GB/s per GPU each way{}\n",
                     bytes_label(c.host.memory_bytes), c.host.cpu_cores,
                     readable(c.host.cpu_flops / units::kGiga),
                     readable(c.host.memory_bandwidth_bytes_per_s / units::kGB),
                     bytes_label(c.host.memory_bytes / gpus),
                     readable(static_cast<double>(c.host.cpu_cores) / gpus),
                     readable(c.host.pcie_bandwidth_bytes_per_s / units::kGB),
                     source_note(c.host.source));
  if (c.has_nvme()) {
    out << fmt::format("per node (NVMe): {} GB, read {} GB/s, write {} GB/s; per GPU: {} GB, "
                       "read {} GB/s, write {} GB/s{}\n",
                       readable(c.nvme.capacity_bytes / units::kGB),
                       readable(c.nvme.read_bytes_per_s / units::kGB),
                       readable(c.nvme.write_bytes_per_s / units::kGB),
                       readable(c.nvme.capacity_bytes / units::kGB / gpus),
                       readable(c.nvme.read_bytes_per_s / units::kGB / gpus),
                       readable(c.nvme.write_bytes_per_s / units::kGB / gpus),
                       source_note(c.nvme.source));
  } else {
    out << "per node (NVMe): none: the planner proposes no NVMe offload and a plan that asks "
           "for it is refused\n";
  }
  if (c.has_intra_node()) {
    out << fmt::format("link within a node, per GPU each way: {} GB/s, {} us latency{}\n",
                       readable(c.intra_node.bandwidth_bytes_per_s / units::kGB),
                       readable(c.intra_node.latency_s / units::kMicrosecond),
                       source_note(c.intra_node.source));
  } else {
    out << "link within a node: none (one GPU per node; --gpus-per-node above 1 needs an "
           "\"intra_node\" block)\n";
  }
  if (c.has_inter_node()) {
    out << fmt::format("link between nodes, per GPU each way: {} GB/s ({} GB/s per node), {} us "
                       "latency{}\n",
                       readable(c.inter_node.bandwidth_bytes_per_s / units::kGB),
                       readable(c.inter_node.bandwidth_bytes_per_s * gpus / units::kGB),
                       readable(c.inter_node.latency_s / units::kMicrosecond),
                       source_note(c.inter_node.source));
  } else {
    out << "link between nodes: none (a one-node file; --nodes above 1 needs an \"inter_node\" "
           "block)\n";
  }
  out << fmt::format("memory tiers: device, host{}\n", c.has_nvme() ? ", nvme" : "");
  print_headroom(out, c, profile);
  const HostHeadroom& host = host_headroom_for(c);
  out << fmt::format("host headroom: {:.1f}% of a node's memory + {:.0f} MiB per rank: {} of "
                     "{} usable with {}{}\n",
                     100.0 * host.reserved_fraction, host.per_rank_bytes / units::kMiB,
                     bytes_label(usable_host_bytes(c.host.memory_bytes, c.gpus_per_node, host)),
                     bytes_label(c.host.memory_bytes), plural(c.gpus_per_node, "rank"),
                     source_note(host.source));
  out << profile.line() << "\n";
}

int run_cluster(const ClusterOptions& options, std::ostream& out) {
  const ClusterSpec cluster = load_cluster(options.describe, options.shape);
  describe(out, cluster, choose_profile(options.profile, cluster));
  return 0;
}

}  // namespace

void add_cluster_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<ClusterOptions>();
  CLI::App* command = app.add_subcommand(
      "cluster", "Describe what the cost model assumes of a cluster file");
  command->add_option("--describe", options->describe, "cluster: a JSON file or a bundled name")
      ->required();
  add_cluster_shape_options(*command, options->shape);
  add_profile_options(*command, options->profile.profile, options->profile.no_profile);
  command->callback(
      [options, &context] { context.exit_code = run_cluster(*options, *context.out); });
}

}  // namespace strata::cli
