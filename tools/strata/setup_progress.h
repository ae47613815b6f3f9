// What `strata run` says while rank 0 sets up, when that takes long enough to wonder: a
// large model's parameters take seconds to draw (minutes on one CPU rank before they ran on
// every thread), and nothing else is printed until the first step. Quiet when set-up is
// quick (the CLI tests' expected outputs stay as they are): after kQuietS a line naming
// the model and what set-up is doing, a progress line every kEveryS after that, and a
// summary line when it is done.
// The libraries report through model::InitProgress (counter()) and the model state's
// OffloadOptions::on_placed (placement(): GiB placed on each tier, and in the summary the
// rate, GB/s of set-up); only this prints.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>

#include "cost_model/specs/step_report.h"
#include "executor/model/param_init.h"

namespace strata::cli {

class SetupProgress {
 public:
  static constexpr double kQuietS = 1.0;
  static constexpr double kEveryS = 10.0;

  // `model_params`: the model's parameter count, for the first line. Disabled (a rank other
  // than 0), it prints nothing and starts no thread.
  SetupProgress(std::ostream& out, std::string model_name, std::int64_t model_params,
                bool enabled);
  ~SetupProgress();  // stops without a summary (set-up failed: the error says why)
  SetupProgress(const SetupProgress&) = delete;
  SetupProgress& operator=(const SetupProgress&) = delete;

  // What set-up is doing now ("opening the data", "initialising parameters"), for the lines.
  void phase(std::string what);
  // Adds to the count of parameters initialised on this rank (any thread).
  model::InitProgress counter();
  // Takes the bytes this rank has placed so far on each tier (any thread).
  std::function<void(const TierBytes&)> placement();
  // Set-up is done: the summary line ("set up in 2.4 s: ... <details>") if anything was
  // printed. Call once, before the first step's line.
  void finish(const std::string& details);

 private:
  void watch();
  std::string line_locked(double elapsed_s) const;
  // "; placed on rank 0: device 1.2 GiB, host 3.4 GiB, NVMe 0.0 GiB", or "" before any.
  std::string placed_text() const;
  double elapsed_s() const;

  std::ostream& out_;
  const std::string model_name_;
  const std::int64_t model_params_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::atomic<std::int64_t> initialised_{0};
  std::atomic<std::int64_t> placed_device_{0}, placed_host_{0}, placed_nvme_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::string phase_ = "starting";
  bool done_ = false;
  bool printed_ = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace strata::cli
