// The launcher's record of which ranks ended unfinished (rank_liveness.h): one poll()
// thread over the listening socket and the ranks' connections.
#include "executor/comm/rank_liveness.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

SystemError socket_error(const char* call) {
  return SystemError(fmt::format("rank liveness: {} failed: {}", call, std::strerror(errno)));
}

}  // namespace

LivenessListener::LivenessListener() : started_s_(now_s()) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw socket_error("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t length = sizeof(addr);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 128) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &length) != 0 ||
      ::pipe2(wake_, O_CLOEXEC) != 0) {
    const SystemError e = socket_error("bind/listen/getsockname/pipe2");
    ::close(listen_fd_);
    throw e;
  }
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { loop(); });
}

LivenessListener::~LivenessListener() {
  const char byte = 0;
  if (::write(wake_[1], &byte, 1) < 0) {}  // the thread ends on any wake-up
  thread_.join();
  ::close(wake_[0]);
  ::close(wake_[1]);
  ::close(listen_fd_);
}

std::string LivenessListener::address() const {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return fmt::format("{}:{}", host, port_);
}

std::vector<LivenessListener::Ended> LivenessListener::unfinished() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return unfinished_;
}

std::vector<LivenessListener::Ended> LivenessListener::finished() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return finished_;
}

bool LivenessListener::all_finished_cleanly(int ranks) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::vector<bool> clean(static_cast<std::size_t>(std::max(ranks, 0)), false);
  for (const Ended& e : finished_) {
    if (e.rank >= 0 && e.rank < ranks && e.exit_code == 0) {
      clean[static_cast<std::size_t>(e.rank)] = true;
    }
  }
  return ranks > 0 && unfinished_.empty() && connected_.empty() &&
         std::all_of(clean.begin(), clean.end(), [](bool c) { return c; });
}

std::vector<LivenessListener::Ended> LivenessListener::still_connected() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return connected_;
}

void LivenessListener::loop() {
  struct Connection {
    std::string text;  // what the rank sent
  };
  std::map<int, Connection> connections;
  while (true) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const auto& [fd, c] : connections) fds.push_back({fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;  // nothing to report to: the job goes on without
    }
    if (fds[0].revents != 0) break;
    if (fds[1].revents & POLLIN) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) connections[fd] = {};
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      char buffer[512];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      Connection& c = connections[fds[i].fd];
      if (n > 0) {
        c.text.append(buffer, static_cast<size_t>(n));
        continue;
      }
      // Closed (or reset): an end; unfinished unless it said "done CODE".
      Ended e;
      std::istringstream words(c.text);
      words >> e.rank >> e.host;
      e.at_s = now_s() - started_s_;
      std::string done;
      const bool finished = (words >> done) && done == "done" && (words >> e.exit_code);
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        (finished ? finished_ : unfinished_).push_back(e);
      }
      ::close(fds[i].fd);
      connections.erase(fds[i].fd);
    }
    std::vector<Ended> connected;
    for (const auto& [fd, c] : connections) {
      Ended e;
      std::istringstream words(c.text);
      if (words >> e.rank >> e.host) connected.push_back(e);
    }
    std::sort(connected.begin(), connected.end(),
              [](const Ended& a, const Ended& b) { return a.rank < b.rank; });
    const std::lock_guard<std::mutex> lock(mutex_);
    connected_ = std::move(connected);
  }
  for (const auto& [fd, c] : connections) ::close(fd);
}

LivenessBeacon::LivenessBeacon(const std::string& address, int rank, const std::string& host) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(address.substr(0, colon).c_str(), address.substr(colon + 1).c_str(), &hints,
                    &found) != 0) {
    return;
  }
  for (addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
    fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd_ >= 0 && ::connect(fd_, a->ai_addr, a->ai_addrlen) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd_ < 0) return;
  const std::string hello = fmt::format("{} {}\n", rank, host);
  if (::send(fd_, hello.data(), hello.size(), MSG_NOSIGNAL) < 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

LivenessBeacon::~LivenessBeacon() {
  if (fd_ >= 0) ::close(fd_);
}

void LivenessBeacon::finished(int exit_code) {
  if (fd_ < 0) return;
  const std::string done = fmt::format("done {}\n", exit_code);
  if (::send(fd_, done.data(), done.size(), MSG_NOSIGNAL) < 0) {}  // best effort
}

}  // namespace strata
