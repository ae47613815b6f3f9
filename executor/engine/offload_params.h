// ZeRO-Infinity's parameter fetch for ZeRO-3 with offloaded parameters: a unit's 1/d shard
// lives in host memory or on NVMe and is brought into a device-tier buffer right before the
// unit's all-gather, then freed with it. prefetch() starts that move for a unit ahead of use
// (the engine asks for the next `prefetch_depth` units of a pass): from the host an async
// copy on the copy stream, from NVMe an io_uring read into a host staging buffer that the
// later take() waits for and copies up (from pageable staging: staged on the call, so the
// staging may go at once). A prefetched shard is consumed by the unit's next take(), so every
// gather moves the shard exactly once. Nothing here stalls the host on a copy: each copy's
// mark goes to whoever reads the device shard (a stream wait) or writes the host shard (a
// host wait, before the CPU optimizer updates it).
// Device bytes: one shard per unit in flight ("offload:param_fetch"); host staging for NVMe
// reads ("offload:param_staging"), both through the accounting allocator.
// Deliberately not here: the all-gather (model_state.cc), what to prefetch (the engine).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "executor/engine/offload_tiers.h"
#include "executor/memory/accounting_allocator.h"
#include "executor/offload/aligned_buffer.h"
#include "executor/offload/io_uring_file.h"

namespace strata::engine {

// Where a unit's parameter shard lives: exactly one of host / nvme_name.
struct ShardSource {
  const float* host = nullptr;
  std::string nvme_name;
  std::int64_t floats = 0;
};

class ParamFetcher {
 public:
  ParamFetcher(OffloadLinks& links, Backend& backend) : links_(&links), backend_(&backend) {}
  ParamFetcher(const ParamFetcher&) = delete;
  ParamFetcher& operator=(const ParamFetcher&) = delete;
  ~ParamFetcher();  // waits for reads in flight before their staging is freed

  // A shard on its way: valid on the copy stream at `ready` (a Backend mark).
  struct Fetched {
    Tensor device;
    int ready = -1;
  };
  // Starts moving the unit's shard up; a no-op when it is already on its way. Returns the
  // mark after which the host may write the host shard again (-1: nothing of it in flight).
  int prefetch(const std::string& unit, const ShardSource& source);
  // The unit's shard in a device-tier fp32 tensor (the prefetched one, or fetched now).
  Fetched take(const std::string& unit, const ShardSource& source);
  bool pending(const std::string& unit) const { return in_flight_.count(unit) != 0; }

 private:
  struct InFlight {
    Tensor device;
    int ready = -1;  // the H2D copy's mark (host source: at start; NVMe: at finish)
    offload::AlignedBuffer staging;  // NVMe only
    Reservation staging_bytes;
    offload::IoEngine::Ticket ticket = 0;
  };
  InFlight start(const ShardSource& source);
  Fetched finish(InFlight& f, const ShardSource& source);

  OffloadLinks* links_;
  Backend* backend_;
  std::map<std::string, InFlight> in_flight_;
};

}  // namespace strata::engine
