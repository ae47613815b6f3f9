// The offload links and their byte counters (see offload_tiers.h).
#include "executor/engine/offload_tiers.h"

#include <fmt/format.h>

#include <stdexcept>

#include "cost_model/specs/errors.h"

namespace strata::engine {
namespace {
constexpr double kFloatBytes = 4;
}  // namespace

OffloadLinks::OffloadLinks(const OffloadPlan& plan, const OffloadOptions& options,
                           Backend& backend)
    : options_(options), backend_(&backend) {
  if (options_.prefetch_depth < 1) {
    throw ConfigError(fmt::format("--prefetch-depth: value {}, expected >= 1",
                                  options_.prefetch_depth));
  }
  const bool nvme = plan.optimizer == OffloadTier::kNvme ||
                    plan.gradients == OffloadTier::kNvme || plan.params == OffloadTier::kNvme;
  if (nvme) {
    offload::NvmeStoreOptions store_options;
    store_options.dir = options_.nvme_dir;
    store_ = std::make_unique<offload::NvmeStore>(store_options, &backend.accounting());
  }
}

void OffloadLinks::host_to_device(float* dst, const float* src, std::int64_t n) {
  // The device side may still be read (or written) by compute work issued before: order
  // the copy after it (a no-op on the synchronous CPU backend).
  backend_->wait(Stream::kCopy, backend_->record(Stream::kCompute));
  backend_->copy(dst, src, n * 4, Stream::kCopy);
  count(&TransferBytes::host_to_device, static_cast<double>(n) * kFloatBytes);
}

void OffloadLinks::device_to_host(float* dst, const float* src, std::int64_t n) {
  backend_->wait(Stream::kCopy, backend_->record(Stream::kCompute));
  backend_->copy(dst, src, n * 4, Stream::kCopy);
  count(&TransferBytes::device_to_host, static_cast<double>(n) * kFloatBytes);
}

int OffloadLinks::host_to_device_async(float* dst, const float* src, std::int64_t n) {
  backend_->wait(Stream::kCopy, backend_->record(Stream::kCompute));
  backend_->copy_async(dst, src, n * 4, Stream::kCopy);
  count(&TransferBytes::host_to_device, static_cast<double>(n) * kFloatBytes);
  return backend_->record(Stream::kCopy);
}

int OffloadLinks::device_to_host_async(float* dst, const float* src, std::int64_t n) {
  backend_->wait(Stream::kCopy, backend_->record(Stream::kCompute));
  backend_->copy_async(dst, src, n * 4, Stream::kCopy);
  count(&TransferBytes::device_to_host, static_cast<double>(n) * kFloatBytes);
  return backend_->record(Stream::kCopy);
}

void OffloadLinks::host_to_nvme(const std::string& name, const float* src, std::int64_t n) {
  backend_->on_host("nvme write of '" + name + "'", {host_reads(src, n * 4)},
                    [&] { store().write(name, src, n); });
  count(&TransferBytes::host_to_nvme, static_cast<double>(n) * kFloatBytes);
}

void OffloadLinks::nvme_to_host(const std::string& name, float* dst, std::int64_t n) {
  backend_->on_host("nvme read of '" + name + "'", {host_writes(dst, n * 4)},
                    [&] { store().read(name, dst, n); });
  count(&TransferBytes::nvme_to_host, static_cast<double>(n) * kFloatBytes);
}

void OffloadLinks::count_nvme(std::int64_t read_bytes, std::int64_t written_bytes) {
  count(&TransferBytes::nvme_to_host, static_cast<double>(read_bytes));
  count(&TransferBytes::host_to_nvme, static_cast<double>(written_bytes));
}

void OffloadLinks::count_host_to_device(std::int64_t bytes) {
  count(&TransferBytes::host_to_device, static_cast<double>(bytes));
}

TransferBytes OffloadLinks::bytes() const {
  const std::lock_guard<std::mutex> lock(counting_);
  return bytes_;
}

void OffloadLinks::reset_bytes() {
  const std::lock_guard<std::mutex> lock(counting_);
  bytes_ = {};
}

void OffloadLinks::count(double TransferBytes::*direction, double bytes) {
  const std::lock_guard<std::mutex> lock(counting_);
  bytes_.*direction += bytes;
}

offload::NvmeStore& OffloadLinks::store() {
  if (store_ == nullptr) throw std::logic_error("offload: no tier is nvme, so there is no store");
  return *store_;
}

}  // namespace strata::engine
