// `strata run`'s set-up lines (see setup_progress.h).
#include "tools/strata/setup_progress.h"

#include <fmt/format.h>

#include <utility>

namespace strata::cli {
namespace {

std::string millions(std::int64_t n) { return fmt::format("{:.0f}M", static_cast<double>(n) / 1e6); }

std::string gib(std::int64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / static_cast<double>(1 << 30));
}

}  // namespace

SetupProgress::SetupProgress(std::ostream& out, std::string model_name, std::int64_t model_params,
                             bool enabled)
    : out_(out), model_name_(std::move(model_name)), model_params_(model_params) {
  if (enabled) thread_ = std::thread([this] { watch(); });
}

SetupProgress::~SetupProgress() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SetupProgress::phase(std::string what) {
  const std::lock_guard<std::mutex> lock(mutex_);
  phase_ = std::move(what);
}

model::InitProgress SetupProgress::counter() {
  return [this](std::int64_t n) { initialised_.fetch_add(n, std::memory_order_relaxed); };
}

std::function<void(const TierBytes&)> SetupProgress::placement() {
  return [this](const TierBytes& placed) {
    placed_device_.store(static_cast<std::int64_t>(placed.device), std::memory_order_relaxed);
    placed_host_.store(static_cast<std::int64_t>(placed.host), std::memory_order_relaxed);
    placed_nvme_.store(static_cast<std::int64_t>(placed.nvme), std::memory_order_relaxed);
  };
}

std::string SetupProgress::placed_text() const {
  const auto device = placed_device_.load(std::memory_order_relaxed);
  const auto host = placed_host_.load(std::memory_order_relaxed);
  const auto nvme = placed_nvme_.load(std::memory_order_relaxed);
  if (device + host + nvme == 0) return {};
  return fmt::format("; placed on rank 0: device {}, host {}, NVMe {}", gib(device), gib(host),
                     gib(nvme));
}

double SetupProgress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string SetupProgress::line_locked(double elapsed_s) const {
  const std::int64_t done = initialised_.load(std::memory_order_relaxed);
  return fmt::format("strata run: setting up, {}{}, {:.1f} s\n", phase_,
                     done > 0 ? fmt::format(" ({} parameters initialised on rank 0{})",
                                            millions(done), placed_text())
                              : std::string(),
                     elapsed_s);
}

void SetupProgress::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  double next = kQuietS;
  while (!done_) {
    const auto deadline = start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                       std::chrono::duration<double>(next));
    if (wake_.wait_until(lock, deadline, [this] { return done_; })) break;
    if (!printed_) {
      out_ << fmt::format("strata run: setting up model {} ({} parameters): {}, {:.1f} s\n",
                          model_name_, millions(model_params_), phase_, elapsed_s())
           << std::flush;
      printed_ = true;
    } else {
      out_ << line_locked(elapsed_s()) << std::flush;
    }
    next += next == kQuietS ? kEveryS - kQuietS : kEveryS;
  }
}

void SetupProgress::finish(const std::string& details) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!printed_) return;
  const std::int64_t done = initialised_.load(std::memory_order_relaxed);
  const double seconds = elapsed_s();
  // The rate of the whole set-up: what placing the model state costs end to end.
  const double placed = static_cast<double>(placed_device_.load() + placed_host_.load() +
                                            placed_nvme_.load());
  const std::string rate =
      placed > 0 && seconds > 0 ? fmt::format(", {:.1f} GB/s", placed / seconds / 1e9) : "";
  out_ << fmt::format("strata run: set up in {:.1f} s ({} parameters initialised on rank 0{}{}{})\n",
                      seconds, millions(done), placed_text(), rate,
                      details.empty() ? "" : ", " + details)
       << std::flush;
}

}  // namespace strata::cli
