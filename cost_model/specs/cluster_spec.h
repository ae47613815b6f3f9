// ClusterSpec: the machines a plan runs on. JSON keys carry units (memory_gib, bf16_tflops,
// bandwidth_gb_per_s = 1e9 bytes/s, latency_us); the struct holds SI values. Each hardware
// block may have a "source" string saying where the figures come from (optional, but the
// bundled files all cite theirs). Optional blocks: "nvme" (absent: the nodes have no NVMe
// tier and no plan may offload to one), "intra_node" (required when gpus_per_node > 1),
// "inter_node" (required when nodes > 1), "device_headroom" and "host_headroom"
// (device_headroom.h; without them the backend's defaults, backend_facts.h): a one-GPU
// machine needs only "device" and "host". A file with problems is refused
// with one ConfigError naming every missing or wrong key at once.
#pragma once

#include <cstdint>
#include <string>

#include "cost_model/specs/device_headroom.h"
#include "cost_model/specs/json_reader.h"

namespace strata {

enum class Backend { kCuda, kCpu };

struct DeviceSpec {
  std::string name;
  double memory_bytes = 0;            // JSON memory_gib
  double bf16_flops = 0;              // peak dense bf16/fp16, JSON bf16_tflops
  double fp32_flops = 0;              // peak fp32 (non-tensor-core), JSON fp32_tflops
  double memory_bandwidth_bytes_per_s = 0;  // HBM (or DRAM on the CPU backend), JSON hbm_bandwidth_gb_per_s
  std::string source;
};

struct HostSpec {
  double memory_bytes = 0;                 // per node, JSON memory_gib
  double pcie_bandwidth_bytes_per_s = 0;   // host<->device per GPU, one direction, JSON pcie_bandwidth_gb_per_s
  std::int64_t cpu_cores = 0;              // per node
  double cpu_flops = 0;                    // per node, fp32 vector peak, JSON cpu_gflops
  double memory_bandwidth_bytes_per_s = 0; // per node DRAM, JSON memory_bandwidth_gb_per_s
  std::string source;
};

struct NvmeSpec {
  double capacity_bytes = 0;               // per node, JSON capacity_gb
  double read_bytes_per_s = 0;             // per node, JSON read_bandwidth_gb_per_s
  double write_bytes_per_s = 0;            // per node, JSON write_bandwidth_gb_per_s
  std::string source;
};

struct LinkSpec {
  double bandwidth_bytes_per_s = 0;  // per GPU, one direction, JSON bandwidth_gb_per_s
  double latency_s = 0;              // JSON latency_us
  std::string source;
};

struct ClusterSpec {
  std::string name;
  Backend backend = Backend::kCuda;  // JSON "backend": "cuda" | "cpu" (optional, default cuda)
  std::int64_t nodes = 0;
  std::int64_t gpus_per_node = 0;
  DeviceSpec device;
  HostSpec host;
  NvmeSpec nvme;         // all zero when the file has no "nvme" block
  LinkSpec intra_node;   // NVLink/NVSwitch (or shared memory on the CPU backend); all zero
                         // when a one-GPU-per-node file has no "intra_node" block
  LinkSpec inter_node;   // each GPU's share of the node's network (8 x 200 Gb/s HDR / 8 GPUs
                         // = 25 GB/s); all zero when a one-node file has no "inter_node" block
  DeviceHeadroom headroom;  // reserved on every device until a profile measures it
  HostHeadroom host_headroom;  // JSON "host_headroom" (optional): see host_headroom_for

  static ClusterSpec from_json(const Json& json, const std::string& source);
  static ClusterSpec load(const std::string& path);
  Json to_json() const;

  std::int64_t total_gpus() const { return nodes * gpus_per_node; }
  bool has_nvme() const { return nvme.capacity_bytes > 0; }
  bool has_intra_node() const { return intra_node.bandwidth_bytes_per_s > 0; }
  bool has_inter_node() const { return inter_node.bandwidth_bytes_per_s > 0; }
};

// `--nodes` / `--gpus-per-node`: the cluster's shape, changed from the command line. Every
// per-GPU and per-node figure stays the file's.
struct ClusterShape {
  std::int64_t nodes = 0;          // 0: the file's
  std::int64_t gpus_per_node = 0;  // 0: the file's
};

// The cluster with `shape` applied. ConfigError naming the flag when a value is out of range,
// or when it asks for a link the file does not describe (several GPUs per node without
// "intra_node", several nodes without "inter_node").
ClusterSpec with_shape(ClusterSpec cluster, const ClusterShape& shape);

std::string to_string(Backend backend);

}  // namespace strata
