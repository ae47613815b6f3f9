// The offload links of one rank (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity, Rajbhandari
// et al. 2021) and their byte counters: the "copy stream" the model state moves its
// offloaded tensors through.
//
//   device <-> host   Backend::copy on the copy stream (a memcpy on the CPU backend, a
//                     cudaMemcpyAsync from/to pinned memory on CUDA): complete on return
//                     (host_to_device, device_to_host), or at the mark the *_async forms
//                     return, which a stream or the host waits for before touching either
//                     side. Offloaded state is fp32 on the host and NVMe on every backend.
//   host <-> nvme     whole tensors through the NvmeStore (io_uring, O_DIRECT), host work on
//                     the host buffer (Backend::on_host), or the tiles the streamed CPU AdamW
//                     moves (counted by the caller).
//
// Counters are the tensors' own bytes per direction since reset_bytes() (counted from the
// issuing thread and the backend's host stream alike, under a lock), so a step's
// traffic can be compared with cost_model's offload_transfer_bytes() to the byte (the 4 KiB
// padding of O_DIRECT files is not traffic of the model; the allocator does not count
// padding either). The NvmeStore exists only when some tier is "nvme"; its run directory is
// removed when this object goes (also while unwinding from an error).
// Deliberately not here: which tensor goes where and when (model_state.cc), the parameter
// prefetch queue (offload_params.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "cost_model/specs/plan.h"
#include "cost_model/specs/step_report.h"
#include "executor/engine/backend.h"
#include "executor/memory/accounting_allocator.h"
#include "executor/offload/nvme_store.h"

namespace strata::engine {

struct OffloadOptions {
  std::filesystem::path nvme_dir = "/tmp/strata-nvme";  // `strata run --nvme-dir`
  // ZeRO-3 offloaded parameters: how many units ahead of the one in use are fetched from the
  // host / NVMe into device buffers (`strata run --prefetch-depth`); >= 1.
  int prefetch_depth = 2;
  // Tile of the streamed CPU AdamW (floats, a multiple of 1024): 3 x 3 tiles of host
  // staging at most, whatever the model size.
  std::int64_t adam_tile_floats = 1 << 16;
  // Told after each unit of the model state is placed: the bytes this rank has placed so
  // far on each tier (set-up progress, which `strata run` prints). May be empty.
  std::function<void(const TierBytes&)> on_placed;
};

class OffloadLinks {
 public:
  // Opens the NvmeStore under options.nvme_dir when any tier of `plan` is nvme (SystemError
  // naming the directory when it cannot be created). backend must outlive this.
  OffloadLinks(const OffloadPlan& plan, const OffloadOptions& options, Backend& backend);

  // Device-tier dst <- host-tier src and back: n fp32.
  void host_to_device(float* dst, const float* src, std::int64_t n);
  void device_to_host(float* dst, const float* src, std::int64_t n);
  // The same without the host waiting: the mark (Backend::record on the copy stream) the copy
  // is done at.
  int host_to_device_async(float* dst, const float* src, std::int64_t n);
  int device_to_host_async(float* dst, const float* src, std::int64_t n);
  // Whole NVMe tensors from / to host memory: n floats (the tensor's size).
  void host_to_nvme(const std::string& name, const float* src, std::int64_t n);
  void nvme_to_host(const std::string& name, float* dst, std::int64_t n);
  // Traffic moved by someone else through the store (the streamed optimizer's tiles).
  void count_nvme(std::int64_t read_bytes, std::int64_t written_bytes);
  void count_host_to_device(std::int64_t bytes);

  bool has_store() const { return store_ != nullptr; }
  offload::NvmeStore& store();  // std::logic_error when no tier is nvme
  const OffloadOptions& options() const { return options_; }

  TransferBytes bytes() const;
  void reset_bytes();

 private:
  OffloadOptions options_;
  Backend* backend_;
  std::unique_ptr<offload::NvmeStore> store_;
  void count(double TransferBytes::*direction, double bytes);
  mutable std::mutex counting_;
  TransferBytes bytes_;
};

}  // namespace strata::engine
