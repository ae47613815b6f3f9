// DeviceHeadroom: the device memory a run takes outside the model's tensors (the CUDA
// context with cuBLAS and cuDNN loaded, each communicator's buffers, the caching
// allocator's fragmentation). One JSON block, "device_headroom": {"context_mib",
// "communicator_mib", "fragmentation_fraction", "source"}, read here for both files that
// may carry it: a Profile (measured by `strata calibrate --backend cuda`) and a ClusterSpec
// (the documented estimate a bundled cluster reserves until a profile measures it). The
// cost model takes the profile's when it has one, else the cluster's (cost_model.cc).
#pragma once

#include <string>

#include "cost_model/json_reader.h"

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

}  // namespace strata
