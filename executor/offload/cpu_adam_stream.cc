// CpuAdamStream: tiled AdamW with NVMe-resident state triple-buffered through io_uring
// (see cpu_adam_stream.h).
#include "executor/offload/cpu_adam_stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>
#include <stdexcept>

#include "cost_model/specs/errors.h"

namespace strata::offload {
namespace {

constexpr int kSlots = 3;  // tile k-1 writing, tile k computing, tile k+1 reading
constexpr std::int64_t kFloatBytes = static_cast<std::int64_t>(sizeof(float));
constexpr std::int64_t kFloatsPerPage = kDirectIoAlignment / kFloatBytes;  // 1024

}  // namespace

CpuAdamStream::CpuAdamStream(AdamState state, std::int64_t tile_floats, NvmeStore* store,
                             AccountingAllocator* allocator)
    : state_(std::move(state)), tile_floats_(tile_floats), store_(store) {
  if (tile_floats_ <= 0 || tile_floats_ % kFloatsPerPage != 0) {
    throw ConfigError(fmt::format("cpu adam stream: tile_floats = {}; expected a positive "
                                  "multiple of {} (4096-byte O_DIRECT alignment)",
                                  tile_floats_, kFloatsPerPage));
  }
  if (state_.n < 0) {
    throw std::invalid_argument(fmt::format("cpu adam stream: n = {}; expected >= 0", state_.n));
  }
  for (const auto* array : {&state_.param, &state_.m, &state_.v}) {
    if (!array->on_nvme()) continue;
    if (store_ == nullptr || !store_->contains(array->nvme_name)) {
      throw std::invalid_argument(fmt::format(
          "cpu adam stream: state array '{}' is on nvme but the store {}", array->nvme_name,
          store_ == nullptr ? "is missing" : "has no such tensor"));
    }
    if (store_->count(array->nvme_name) != state_.n) {
      throw std::invalid_argument(fmt::format("cpu adam stream: nvme tensor '{}' has {} floats; "
                                              "the state has {}", array->nvme_name,
                                              store_->count(array->nvme_name), state_.n));
    }
    ++nvme_arrays_;
  }
  if (nvme_arrays_ > 0) {
    const std::int64_t bytes = kSlots * nvme_arrays_ * tile_floats_ * kFloatBytes;
    if (allocator != nullptr) {
      staging_reservation_ = allocator->reserve(MemoryTier::kHost, bytes, "offload:adam_staging");
    }
    staging_ = AlignedBuffer(bytes);
  }
}

StreamIo CpuAdamStream::step(const float* grad, const kernels::cpu::AdamWParams& hp, int step,
                             const TileDone& on_tile, const Ranges& no_decay,
                             Bf16Bits* param_bf16) {
  // The kernel over local elements [lo, hi) of arrays whose element 0 is global element
  // `origin`, split where weight decay turns off (element-wise: the same bits as one call).
  const auto update = [&](float* p, const float* g, float* m, float* v, std::int64_t lo,
                          std::int64_t hi, std::int64_t origin) {
    kernels::cpu::AdamWParams off = hp;
    off.weight_decay = 0.0f;
    Bf16Bits* copy = param_bf16 == nullptr ? nullptr : param_bf16 + origin;
    const auto run = [&](std::int64_t b, std::int64_t e, const kernels::cpu::AdamWParams& h) {
      kernels::cpu::adamw_update_range(p, g, m, v, b, e, h, step, kernels::cpu::Isa::kBest,
                                       copy);
    };
    std::int64_t at = lo;
    for (const auto& [b, e] : no_decay) {
      const std::int64_t nb = std::max(b - origin, at), ne = std::min(e - origin, hi);
      if (nb >= ne) continue;
      if (at < nb) run(at, nb, hp);
      run(nb, ne, off);
      at = ne;
    }
    if (at < hi) run(at, hi, hp);
  };
  if (grad == nullptr && state_.n > 0) {
    throw std::invalid_argument("cpu adam stream: grad is null");
  }
  const std::int64_t n = state_.n;
  const std::int64_t tiles = this->tiles();
  std::array<StateArray*, 3> arrays{&state_.param, &state_.m, &state_.v};

  // Slot s of NVMe array j starts at staging + ((j * kSlots) + s) * tile_floats.
  std::array<int, 3> nvme_index{-1, -1, -1};
  std::array<UringFile*, 3> files{nullptr, nullptr, nullptr};
  int next = 0;
  for (int a = 0; a < 3; ++a) {
    if (arrays[a]->on_nvme()) {
      nvme_index[a] = next++;
      files[a] = &store_->file(arrays[a]->nvme_name);
    }
  }
  const auto slot_ptr = [&](int a, std::int64_t tile) {
    const std::int64_t slot = tile % kSlots;
    return staging_.f32() + (nvme_index[a] * kSlots + slot) * tile_floats_;
  };
  const auto tile_begin = [&](std::int64_t tile) { return tile * tile_floats_; };
  const auto tile_len = [&](std::int64_t tile) {
    return std::min(tile_floats_, n - tile_begin(tile));
  };
  // On-disk bytes of a tile: rounded up to whole pages (files are padded).
  const auto tile_io_bytes = [&](std::int64_t tile) {
    return round_up_to_alignment(tile_len(tile) * kFloatBytes);
  };

  if (nvme_arrays_ == 0) {
    // All in host memory: nothing to stream; same kernel, same tiles.
    for (std::int64_t t = 0; t < tiles; ++t) {
      const std::int64_t b = tile_begin(t);
      const std::int64_t e = b + tile_len(t);
      update(state_.param.host, grad, state_.m.host, state_.v.host, b, e, 0);
      if (on_tile) on_tile(b, e, state_.param.host + b);
    }
    return {};
  }

  IoEngine& io = store_->engine();
  const IoCounters before = io.counters();
  // Per tile, every array's read ticket (not only the last) must be waited on.
  std::vector<std::vector<IoEngine::Ticket>> read_tickets(static_cast<std::size_t>(tiles));
  std::vector<std::vector<IoEngine::Ticket>> write_tickets(static_cast<std::size_t>(tiles));
  const auto issue_reads = [&](std::int64_t tile) {
    if (tile >= kSlots) {
      for (auto t : write_tickets[tile - kSlots]) io.wait(t);
    }
    for (int a = 0; a < 3; ++a) {
      if (files[a] == nullptr) continue;
      read_tickets[tile].push_back(io.start_read(*files[a], slot_ptr(a, tile),
                                                 tile_io_bytes(tile),
                                                 tile_begin(tile) * kFloatBytes));
    }
  };

  issue_reads(0);
  for (std::int64_t t = 0; t < tiles; ++t) {
    for (auto ticket : read_tickets[t]) io.wait(ticket);
    if (t + 1 < tiles) issue_reads(t + 1);
    const std::int64_t b = tile_begin(t);
    const std::int64_t len = tile_len(t);
    float* p = arrays[0]->on_nvme() ? slot_ptr(0, t) : state_.param.host + b;
    float* m = arrays[1]->on_nvme() ? slot_ptr(1, t) : state_.m.host + b;
    float* v = arrays[2]->on_nvme() ? slot_ptr(2, t) : state_.v.host + b;
    // One kernel call (one OpenMP region) per tile: the blocks queued for tiles t+1 and t-1
    // are in the kernel's hands while the cores compute. Polling between smaller chunks kept
    // the queue fuller in theory but measured slower (2x on a loaded 2-core machine): every
    // OpenMP region waits for its slowest thread to be scheduled.
    update(p, grad + b, m, v, 0, len, b);
    io.poll();
    if (on_tile) on_tile(b, b + len, p);
    for (int a = 0; a < 3; ++a) {
      if (files[a] == nullptr) continue;
      write_tickets[t].push_back(io.start_write(*files[a], slot_ptr(a, t), tile_io_bytes(t),
                                                b * kFloatBytes));
    }
  }
  io.wait_all();
  const IoCounters after = io.counters();
  return StreamIo{after.read_bytes - before.read_bytes, after.written_bytes - before.written_bytes};
}

}  // namespace strata::offload
