// StopSignals: sigaction handlers that only store to lock-free atomics (see stop_signals.h).
#include "executor/runtime/stop_signals.h"

#include <signal.h>

#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata {
namespace {

// The style's one sanctioned global: written by the handler, read by the owner.
std::atomic<int> g_first_signal{0};
std::atomic<int> g_signal_count{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler needs a lock-free atomic");

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2};

extern "C" void on_stop_signal(int signal) {
  const int as = signal == SIGUSR1 ? SIGINT : signal == SIGUSR2 ? SIGTERM : signal;
  int expected = 0;
  g_first_signal.compare_exchange_strong(expected, as);
  g_signal_count.fetch_add(1);
}

}  // namespace

StopSignals::StopSignals() {
  g_first_signal.store(0);
  g_signal_count.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls resume; the owner polls received()
  for (int i = 0; i < 4; ++i) {
    if (::sigaction(kSignals[i], &action, &previous_[i]) != 0) {
      for (int j = 0; j < i; ++j) ::sigaction(kSignals[j], &previous_[j], nullptr);
      throw SystemError(fmt::format("sigaction({}) failed: {}", kSignals[i], std::strerror(errno)));
    }
  }
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 4; ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
}

int StopSignals::received() { return g_first_signal.load(); }
int StopSignals::count() { return g_signal_count.load(); }

std::string StopSignals::name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return fmt::format("signal {}", signal);
}

}  // namespace strata
