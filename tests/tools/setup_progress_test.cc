// strata run's set-up lines (tools/strata/setup_progress.h): nothing when set-up is quick;
// past a second, the model, then the parameters initialised, then the summary.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <thread>

#include "tools/strata/setup_progress.h"

namespace strata::cli {
namespace {

// A stream the watcher thread writes while the test reads it.
class LockedText : public std::streambuf {
 public:
  std::string text() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return text_;
  }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    const char ch = static_cast<char>(c);
    return xsputn(&ch, 1) == 1 ? c : traits_type::eof();
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    text_.append(s, static_cast<std::size_t>(n));
    return n;
  }

 private:
  mutable std::mutex mutex_;
  std::string text_;
};

// The text once it holds `needle`, polled (the watcher prints after kQuietS; a loaded
// machine may wake it late, so no timing is asserted).
std::string wait_for(const LockedText& text, const std::string& needle) {
  for (int i = 0; i < 600 && text.text().find(needle) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return text.text();
}

TEST(SetupProgress, QuietWhenSetUpIsQuick) {
  std::ostringstream out;
  SetupProgress setup(out, "tiny", 500'000, true);
  setup.counter()(500'000);
  setup.finish("");
  EXPECT_EQ(out.str(), "");
}

TEST(SetupProgress, SaysWhatItIsDoingPastASecondThenSumsUp) {
  LockedText text;
  std::ostream out(&text);
  SetupProgress setup(out, "gpt2-350m", 355'000'000, true);
  setup.phase("initialising parameters");
  setup.counter()(120'000'000);
  const std::string first = wait_for(text, "\n");
  EXPECT_EQ(first.rfind("strata run: setting up model gpt2-350m (355M parameters): "
                        "initialising parameters, ", 0), 0u) << first;
  setup.counter()(235'000'000);  // 355M in all, reported in millions
  setup.finish("1.5 GiB of host memory pinned");
  const std::string all = text.text();
  EXPECT_NE(all.find("strata run: set up in "), std::string::npos) << all;
  EXPECT_NE(all.find(" s (355M parameters initialised on rank 0, 1.5 GiB of host memory pinned)\n"),
            std::string::npos) << all;
}

TEST(SetupProgress, SaysTheGibPlacedOnEachTierAndTheRate) {
  LockedText text;
  std::ostream out(&text);
  SetupProgress setup(out, "gpt-8b", 8'269'000'000, true);
  setup.phase("initialising parameters");
  setup.counter()(1'000'000'000);
  // 1.5 GiB on the device, 12.3 GiB on the host, none on NVMe (the last report counts).
  setup.placement()(TierBytes{0.5 * (1 << 30), 2.0 * (1 << 30), 0});
  setup.placement()(TierBytes{1.5 * (1 << 30), 12.3 * (1 << 30), 0});
  wait_for(text, "\n");  // past kQuietS: the summary is printed (the progress line, every
                         // 10 s, says the same through the same text)
  setup.finish("");
  const std::string all = text.text();
  const auto summary = all.find("strata run: set up in ");
  ASSERT_NE(summary, std::string::npos) << all;
  EXPECT_NE(all.find(" s (1000M parameters initialised on rank 0; placed on rank 0: device "
                     "1.5 GiB, host 12.3 GiB, NVMe 0.0 GiB, ", summary), std::string::npos) << all;
  // The rate is the bytes over the set-up's seconds: (1.5 + 12.3) GiB = 14.82 GB. Both are
  // printed to 0.1: rate x seconds is off 14.82 by at most 14.82 x 0.05 / seconds (the
  // seconds' rounding, seconds >= 1) + 0.05 x seconds (the rate's): 0.8 at 1 to 2 s.
  const double seconds = std::stod(all.substr(summary + 22));
  const auto at = all.find("NVMe 0.0 GiB, ", summary);
  const double rate = std::stod(all.substr(at + 14));
  EXPECT_NEAR(rate * seconds, 14.82, 0.05 * seconds + 0.75) << all;
  EXPECT_NE(all.find(" GB/s)\n", summary), std::string::npos) << all;
}

TEST(SetupProgress, ADisabledOneNeverPrints) {
  std::ostringstream out;
  {
    SetupProgress setup(out, "gpt2-350m", 355'000'000, false);  // a rank other than 0
    setup.counter()(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    setup.finish("");
  }
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace strata::cli
