// CpuAdamStream: the CPU AdamW step of ZeRO-Offload / ZeRO-Infinity over fp32 optimizer
// state (master params, m, v) of which each array lives either in host memory or in an
// NvmeStore. NVMe-resident arrays stream through a BOUNDED staging area: three tile slots
// per NVMe array, so while tile k is updated (OpenMP across cores, inside
// kernels::cpu::adamw_update_range), tile k+1 is being read and tile k-1 written by
// io_uring. Staging bytes = 3 * (NVMe arrays) * round_up(tile_floats * 4, 4096), whatever
// the state size.
//
// Result: bit-identical to kernels::cpu::adamw_update over the whole arrays (the update is
// element-wise and the kernel computes its per-step constants the same way for any range).
//
// Deliberately not here: gradient clipping and the gradient all-reduce (the caller scales
// grad first), GPU transfers. A bf16 copy of the updated parameters (the device's compute
// copy) is written in the same pass when asked. After each tile, an optional callback sees
// the updated master params of that tile (to copy them to the device).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "executor/memory/accounting_allocator.h"
#include "executor/offload/aligned_buffer.h"
#include "executor/offload/nvme_store.h"
#include "kernels/cpu/adamw.h"

namespace strata::offload {

// One of param / m / v: exactly one of host (n floats) or nvme_name (a tensor of n floats
// in the store) is set.
struct StateArray {
  float* host = nullptr;
  std::string nvme_name;
  static StateArray in_host(float* p) { return StateArray{p, {}}; }
  static StateArray in_nvme(std::string name) { return StateArray{nullptr, std::move(name)}; }
  bool on_nvme() const { return host == nullptr; }
};

struct AdamState {
  std::int64_t n = 0;  // floats in each array
  StateArray param;    // fp32 master parameters
  StateArray m;
  StateArray v;
};

struct StreamIo {  // bytes moved by one step
  std::int64_t read_bytes = 0;
  std::int64_t written_bytes = 0;
};

class CpuAdamStream {
 public:
  // tile_floats: a positive multiple of 1024 (4096 bytes, the O_DIRECT unit). store may be
  // null when every array is in host memory. allocator (optional) is charged the staging
  // bytes on the host tier under tag "offload:adam_staging".
  CpuAdamStream(AdamState state, std::int64_t tile_floats, NvmeStore* store,
                AccountingAllocator* allocator = nullptr);

  using TileDone = std::function<void(std::int64_t begin, std::int64_t end, const float* param)>;
  // Element ranges [begin, end), sorted and disjoint, where weight decay is off (biases and
  // norms, cost_model/specs/optimizer_schedule.h); elsewhere hp.weight_decay applies.
  using Ranges = std::vector<std::pair<std::int64_t, std::int64_t>>;

  // One AdamW step (1-based step) with grad: (n) in host memory. param_bf16 (null: none):
  // n elements of host memory that receive the updated parameters rounded to bf16
  // (kernels/bf16.h), each tile's before on_tile sees it. Throws SystemError on an I/O
  // failure (the state on NVMe may then be partly updated: a failed step is fatal).
  StreamIo step(const float* grad, const kernels::cpu::AdamWParams& hp, int step,
                const TileDone& on_tile = {}, const Ranges& no_decay = {},
                Bf16Bits* param_bf16 = nullptr);

  std::int64_t staging_bytes() const { return staging_.bytes(); }
  std::int64_t tiles() const { return (state_.n + tile_floats_ - 1) / tile_floats_; }

 private:
  AdamState state_;
  std::int64_t tile_floats_;
  NvmeStore* store_;
  int nvme_arrays_ = 0;
  AlignedBuffer staging_;
  Reservation staging_reservation_;
};

}  // namespace strata::offload
