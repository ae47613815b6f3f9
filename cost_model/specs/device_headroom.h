// DeviceHeadroom: the device memory a run takes outside the model's tensors (the CUDA
// context with cuBLAS and cuDNN loaded, each communicator's buffers, the caching
// allocator's fragmentation). One JSON block, "device_headroom": {"context_mib",
// "communicator_mib", "fragmentation_fraction", "source"}, read here for both files that
// may carry it: a Profile (measured by `strata calibrate --backend cuda`) and a ClusterSpec
// (the documented estimate a bundled cluster reserves until a profile measures it). The
// cost model takes the profile's when it has one, else the cluster's (cost_model.cc).
#pragma once

#include <cstdint>
#include <string>

#include "cost_model/specs/json_reader.h"

namespace strata {

struct DeviceHeadroom {
  double context_bytes = 0;
  double communicator_bytes = 0;     // per communicator the plan's rank belongs to
  double fragmentation_fraction = 0; // of the allocated bytes, lost to the allocator
  std::string source;
  bool any() const { return context_bytes > 0 || communicator_bytes > 0 || fragmentation_fraction > 0; }
};

// Reads the block's four keys (ConfigError naming the file and key on a bad one).
DeviceHeadroom device_headroom_from_json(JsonObjectReader reader);
Json to_json(const DeviceHeadroom& headroom);

// HostHeadroom: the host memory of a node that its ranks' tensors cannot have: the share the
// kernel and the firmware keep, and each rank process's own (its code, libraries and
// communication buffers). A cluster file's "host_headroom": {"reserved_fraction",
// "per_rank_mib", "source"}; without one, the backend's measured default (backend_facts.h).
struct HostHeadroom {
  double reserved_fraction = 0;  // of the node's host memory
  double per_rank_bytes = 0;
  std::string source;
  bool any() const { return reserved_fraction > 0 || per_rank_bytes > 0; }
};
HostHeadroom host_headroom_from_json(JsonObjectReader reader);
Json to_json(const HostHeadroom& headroom);
// What a node of `host_memory_bytes` leaves to the tensors of its `ranks` ranks.
double usable_host_bytes(double host_memory_bytes, std::int64_t ranks, const HostHeadroom& headroom);

}  // namespace strata
