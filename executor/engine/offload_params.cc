// Fetching offloaded ZeRO-3 parameter shards ahead of use (see offload_params.h).
#include "executor/engine/offload_params.h"

namespace strata::engine {

ParamFetcher::~ParamFetcher() {
  if (in_flight_.empty() || !links_->has_store()) return;
  try {
    links_->store().engine().wait_all();
  } catch (...) {
    // The engine drained before reporting its failure: nothing is left in flight.
  }
}

ParamFetcher::InFlight ParamFetcher::start(const ShardSource& source) {
  InFlight f;
  f.device = backend_->allocate(MemoryTier::kDevice, DType::kF32, source.floats,
                                "offload:param_fetch", /*zeroed=*/false);
  if (source.host != nullptr) {
    f.ready = links_->host_to_device_async(f.device.f32(), source.host, source.floats);
    return f;
  }
  // NVMe: whole 4 KiB blocks into aligned host staging (the file is padded to them).
  const std::int64_t bytes = offload::round_up_to_alignment(source.floats * 4);
  f.staging_bytes = backend_->accounting().reserve(MemoryTier::kHost, bytes, "offload:param_staging");
  f.staging = offload::AlignedBuffer(bytes);
  offload::NvmeStore& store = links_->store();
  f.ticket = store.engine().start_read(store.file(source.nvme_name), f.staging.data(), bytes, 0);
  return f;
}

ParamFetcher::Fetched ParamFetcher::finish(InFlight& f, const ShardSource& source) {
  if (source.host == nullptr) {
    links_->store().engine().wait(f.ticket);
    links_->count_nvme(source.floats * 4, 0);
    // From pageable staging: staged before the call returns, so it may be freed after.
    f.ready = links_->host_to_device_async(f.device.f32(), f.staging.f32(), source.floats);
  }
  return Fetched{std::move(f.device), f.ready};
}

int ParamFetcher::prefetch(const std::string& unit, const ShardSource& source) {
  const auto it = in_flight_.find(unit);
  if (it != in_flight_.end()) return source.host != nullptr ? it->second.ready : -1;
  const int ready = in_flight_.emplace(unit, start(source)).first->second.ready;
  return source.host != nullptr ? ready : -1;
}

ParamFetcher::Fetched ParamFetcher::take(const std::string& unit, const ShardSource& source) {
  const auto it = in_flight_.find(unit);
  if (it == in_flight_.end()) {
    InFlight f = start(source);
    return finish(f, source);
  }
  InFlight f = std::move(it->second);
  in_flight_.erase(it);
  return finish(f, source);
}

}  // namespace strata::engine
