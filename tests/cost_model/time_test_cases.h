// The time model's tests' machine and model: 4 nodes of 8 GPUs (300 TFLOP/s bf16, 80 GiB,
// NVLink 300 GB/s, 25 GB/s between nodes) and an 8-layer GPT of hidden 1024, written out so
// that the hand-worked figures do not move when a bundled config changes.
#pragma once

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/units.h"

namespace strata::testing {

inline ClusterSpec test_cluster() {
  ClusterSpec c;
  c.name = "test";
  c.nodes = 4;
  c.gpus_per_node = 8;
  c.device.name = "gpu";
  c.device.memory_bytes = 80 * units::kGiB;
  c.device.bf16_flops = 300e12;
  c.device.fp32_flops = 20e12;
  c.device.memory_bandwidth_bytes_per_s = 2000e9;
  c.host.memory_bytes = 1000 * units::kGiB;
  c.host.pcie_bandwidth_bytes_per_s = 25e9;
  c.host.cpu_cores = 64;
  c.host.cpu_flops = 2000e9;
  c.host.memory_bandwidth_bytes_per_s = 200e9;
  c.nvme.capacity_bytes = 10e12;
  c.nvme.read_bytes_per_s = 16e9;
  c.nvme.write_bytes_per_s = 8e9;
  c.intra_node = {300e9, 2e-6, "test"};
  c.inter_node = {25e9, 5e-6, "test"};
  return c;
}

inline ModelSpec test_model() {
  ModelSpec m;
  m.name = "test";
  m.layers = 8;
  m.hidden = 1024;
  m.heads = 16;
  m.seq_len = 1024;
  m.vocab = 32000;
  m.ffn_hidden = 4096;
  return m;
}

}  // namespace strata::testing
