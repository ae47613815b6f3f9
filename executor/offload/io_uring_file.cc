// UringFile and IoEngine (see io_uring_file.h): O_DIRECT files and block-split, queue-deep
// io_uring transfers with every call checked.
#include "executor/offload/io_uring_file.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "cost_model/specs/errors.h"
#include "executor/offload/aligned_buffer.h"

namespace strata::offload {
namespace {

std::string errno_text(int err) { return fmt::format("{} (errno {})", std::strerror(err), err); }

[[noreturn]] void throw_file_error(const char* operation, const std::filesystem::path& path,
                                   int err, const std::string& detail = {}) {
  throw SystemError(fmt::format("{} of '{}'{} failed: {}", operation, path.string(), detail,
                                errno_text(err)));
}

const char* op_name(bool write) { return write ? "io_uring write" : "io_uring read"; }

}  // namespace

// ---- UringFile ----

UringFile::UringFile(std::filesystem::path path, Create create, OpenMode mode)
    : path_(std::move(path)) {
  int flags = O_RDWR | O_CLOEXEC;
  if (create == Create::kNew) flags |= O_CREAT | O_EXCL;
  const bool want_direct = mode != OpenMode::kBuffered;
  fd_ = ::open(path_.c_str(), flags | (want_direct ? O_DIRECT : 0), 0600);
  if (fd_ < 0 && errno == EINVAL && want_direct) {
    if (mode == OpenMode::kDirect) {
      throw SystemError(fmt::format(
          "open(O_DIRECT) of '{}' failed: {}: the filesystem refuses O_DIRECT; put --nvme-dir "
          "on a local ext4/xfs NVMe filesystem, or allow buffered I/O",
          path_.string(), errno_text(EINVAL)));
    }
    // O_EXCL: a refused O_DIRECT open creates nothing on Linux, so retrying is safe.
    fd_ = ::open(path_.c_str(), flags, 0600);
    if (fd_ >= 0) {
      direct_ = false;
      return;
    }
  }
  if (fd_ < 0) throw_file_error(want_direct ? "open(O_DIRECT)" : "open", path_, errno);
  direct_ = want_direct;
}

UringFile::UringFile(UringFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      direct_(std::exchange(other.direct_, false)) {}

UringFile& UringFile::operator=(UringFile&& other) noexcept {
  if (this != &other) {
    close_noexcept();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    direct_ = std::exchange(other.direct_, false);
  }
  return *this;
}

std::int64_t UringFile::size_bytes() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw_file_error("fstat", path_, errno);
  return static_cast<std::int64_t>(st.st_size);
}

void UringFile::truncate(std::int64_t bytes) {
  if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) {
    throw_file_error("ftruncate", path_, errno, fmt::format(" to {} bytes", bytes));
  }
}

void UringFile::allocate(std::int64_t bytes) {
  if (bytes == 0) return;
  const int rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
  if (rc != 0) throw_file_error("posix_fallocate", path_, rc, fmt::format(" of {} bytes", bytes));
}

void UringFile::sync() {
  if (::fdatasync(fd_) != 0) throw_file_error("fdatasync", path_, errno);
}

void UringFile::close() {
  if (fd_ < 0) return;
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) throw_file_error("close", path_, errno);
}

void UringFile::close_noexcept() noexcept {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
}

// ---- IoEngine ----

IoEngine::IoEngine(IoOptions options) : options_(options), ring_(std::make_unique<io_uring>()) {
  if (options_.block_bytes <= 0 || !is_aligned(options_.block_bytes)) {
    throw ConfigError(fmt::format("io options: block_bytes = {}; expected a positive multiple "
                                  "of {} (the O_DIRECT alignment)",
                                  options_.block_bytes, kDirectIoAlignment));
  }
  if (options_.queue_depth < 1 || options_.queue_depth > 4096) {
    throw ConfigError(fmt::format("io options: queue_depth = {}; expected 1..4096",
                                  options_.queue_depth));
  }
  const int rc = io_uring_queue_init(static_cast<unsigned>(options_.queue_depth), ring_.get(), 0);
  if (rc < 0) {
    throw SystemError(fmt::format("io_uring_queue_init({} entries) failed: {}",
                                  options_.queue_depth, errno_text(-rc)));
  }
  slots_.resize(static_cast<std::size_t>(options_.queue_depth));
  for (std::size_t i = slots_.size(); i-- > 0;) free_slots_.push_back(i);
}

IoEngine::~IoEngine() {
  drain_noexcept();
  io_uring_queue_exit(ring_.get());
}

void IoEngine::write(UringFile& file, const void* buf, std::int64_t bytes, std::int64_t offset) {
  wait(start_write(file, buf, bytes, offset));
}

void IoEngine::read(UringFile& file, void* buf, std::int64_t bytes, std::int64_t offset) {
  wait(start_read(file, buf, bytes, offset));
}

IoEngine::Ticket IoEngine::start_write(UringFile& file, const void* buf, std::int64_t bytes,
                                       std::int64_t offset) {
  // io_uring only reads from buf on a write; the const is restored in spirit.
  return start(Op::kWrite, file, static_cast<std::byte*>(const_cast<void*>(buf)), bytes, offset);
}

IoEngine::Ticket IoEngine::start_read(UringFile& file, void* buf, std::int64_t bytes,
                                      std::int64_t offset) {
  return start(Op::kRead, file, static_cast<std::byte*>(buf), bytes, offset);
}

IoEngine::Ticket IoEngine::start(Op op, UringFile& file, std::byte* buf, std::int64_t bytes,
                                 std::int64_t offset) {
  const bool is_write = op == Op::kWrite;
  if (!file.is_open()) {
    throw SystemError(fmt::format("{} of '{}' at offset {}: the file is not open",
                                  op_name(is_write), file.path().string(), offset));
  }
  if (bytes < 0 || offset < 0 || (buf == nullptr && bytes > 0)) {
    throw SystemError(fmt::format("{} of '{}' at offset {} ({} bytes): bad arguments: {}",
                                  op_name(is_write), file.path().string(), offset, bytes,
                                  errno_text(EINVAL)));
  }
  if (file.direct()) {
    const auto address = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(buf));
    if (!is_aligned(address) || !is_aligned(bytes) || !is_aligned(offset)) {
      throw SystemError(fmt::format(
          "{} of '{}' at offset {} ({} bytes, buffer {}): O_DIRECT needs buffer address, "
          "length and offset multiples of {}: {}",
          op_name(is_write), file.path().string(), offset, bytes, static_cast<void*>(buf),
          kDirectIoAlignment, errno_text(EINVAL)));
    }
  }
  const Ticket ticket = next_ticket_++;
  std::int64_t blocks = 0;
  for (std::int64_t done = 0; done < bytes; done += options_.block_bytes, ++blocks) {
    const std::int64_t len = std::min(options_.block_bytes, bytes - done);
    pending_.push_back(Block{&file, op, buf + done, len, offset + done, ticket});
  }
  if (blocks > 0) open_tickets_.emplace(ticket, blocks);
  submit_pending(false);
  return ticket;
}

void IoEngine::submit_pending(bool wait_for_one) {
  int queued = 0;
  while (!pending_.empty() && !free_slots_.empty()) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (sqe == nullptr) break;  // the submission queue is full until the next submit
    const std::size_t slot = free_slots_.back();
    free_slots_.pop_back();
    const Block block = pending_.front();
    pending_.pop_front();
    slots_[slot] = block;
    if (block.op == Op::kWrite) {
      io_uring_prep_write(sqe, block.file->fd(), block.buf, static_cast<unsigned>(block.bytes),
                          static_cast<__u64>(block.offset));
    } else {
      io_uring_prep_read(sqe, block.file->fd(), block.buf, static_cast<unsigned>(block.bytes),
                         static_cast<__u64>(block.offset));
    }
    io_uring_sqe_set_data64(sqe, slot);
    ++queued;
    ++in_flight_;
  }
  wait_for_one = wait_for_one && in_flight_ > 0;
  if (queued == 0 && !wait_for_one) return;
  // One io_uring_enter both submits the new blocks and, when asked, waits for a completion.
  int rc;
  do {
    rc = wait_for_one ? io_uring_submit_and_wait(ring_.get(), 1) : io_uring_submit(ring_.get());
  } while (rc == -EINTR);
  if (rc < 0) {
    if (queued > 0) {
      // Nothing was taken by the kernel: forget the blocks, drain the rest, report.
      fail(fmt::format("io_uring_submit of {} blocks failed: {}", queued, errno_text(-rc)));
      in_flight_ -= queued;
    } else {
      fail(fmt::format("io_uring_submit_and_wait failed: {}", errno_text(-rc)));
    }
    drain_noexcept();
    pending_.clear();
    open_tickets_.clear();
    throw SystemError(std::exchange(error_, std::string()));
  }
}

void IoEngine::complete(std::size_t slot, int result) {
  Block block = slots_[slot];
  free_slots_.push_back(slot);
  --in_flight_;
  const bool is_write = block.op == Op::kWrite;
  if (result < 0) {
    fail(fmt::format("{} of '{}' at offset {} ({} bytes) failed: {}", op_name(is_write),
                     block.file->path().string(), block.offset, block.bytes,
                     errno_text(-result)));
    return;
  }
  if (result == 0 && block.bytes > 0) {
    fail(fmt::format("{} of '{}' at offset {} ({} bytes) failed: {} (no progress; {})",
                     op_name(is_write), block.file->path().string(), block.offset, block.bytes,
                     is_write ? "short write" : "short read",
                     is_write ? "the device accepted nothing" : "end of file"));
    return;
  }
  if (is_write) {
    counters_.written_bytes += result;
  } else {
    counters_.read_bytes += result;
  }
  if (result < block.bytes) {
    // A short transfer: queue the rest first so the file is still walked in order.
    block.buf += result;
    block.offset += result;
    block.bytes -= result;
    pending_.push_front(block);
    return;
  }
  auto it = open_tickets_.find(block.ticket);
  if (it != open_tickets_.end() && --it->second == 0) open_tickets_.erase(it);
}

void IoEngine::fail(std::string message) {
  if (error_.empty()) error_ = std::move(message);
}

void IoEngine::reap(bool block) {
  submit_pending(block);
  io_uring_cqe* cqe = nullptr;
  while (in_flight_ > 0 && io_uring_peek_cqe(ring_.get(), &cqe) == 0 && cqe != nullptr) {
    const auto slot = static_cast<std::size_t>(io_uring_cqe_get_data64(cqe));
    const int result = cqe->res;
    io_uring_cqe_seen(ring_.get(), cqe);
    complete(slot, result);
  }
  if (!error_.empty()) {
    drain_noexcept();
    pending_.clear();
    open_tickets_.clear();
    throw SystemError(std::exchange(error_, std::string()));
  }
}

void IoEngine::poll() { reap(false); }

bool IoEngine::ticket_done(Ticket ticket) const { return !open_tickets_.contains(ticket); }

void IoEngine::wait(Ticket ticket) {
  while (!ticket_done(ticket)) reap(true);
}

void IoEngine::wait_all() {
  while (!open_tickets_.empty() || in_flight_ > 0 || !pending_.empty()) reap(true);
}

void IoEngine::drain_noexcept() noexcept {
  // Wait for every submitted block; results are dropped (an error is already recorded).
  while (in_flight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(ring_.get(), &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) break;  // the ring is unusable; nothing more will complete
    const auto slot = static_cast<std::size_t>(io_uring_cqe_get_data64(cqe));
    io_uring_cqe_seen(ring_.get(), cqe);
    free_slots_.push_back(slot);
    --in_flight_;
  }
}

}  // namespace strata::offload
