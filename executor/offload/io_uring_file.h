// The NVMe tier's I/O path: a file owner opened for O_DIRECT and an io_uring engine that
// moves byte ranges between aligned host buffers and files, split into blocks of
// block_bytes with up to queue_depth blocks in flight.
//
// - UringFile: move-only fd owner. Open modes: kDirect (O_DIRECT, fails with a SystemError
//   when the filesystem refuses it), kDirectOrBuffered (O_DIRECT, and if the filesystem
//   answers EINVAL, as some overlay and FUSE filesystems do, reopens buffered and says so
//   through direct()), kBuffered. Callers that report bandwidth print direct().
// - IoEngine: one io_uring ring (RAII). read()/write() block until done; start_read()/
//   start_write() queue a transfer and return a ticket that wait() completes, so a caller
//   can compute while the kernel moves data (the streamed optimizer's triple buffering).
//   poll() submits and reaps without blocking. Short transfers are resubmitted for the
//   rest; a transfer that makes no progress (reading past the end of a file) is an error.
// - Every liburing and system call is checked: a failure throws strata::SystemError naming
//   the operation, the file, the offset, the length and the errno text. Before throwing,
//   the engine drains every block it has in flight, so no kernel write lands in a buffer
//   the caller frees while unwinding.
// - On an O_DIRECT file, buffer address, length and offset must be multiples of 4096; the
//   engine checks this before submitting and throws SystemError (EINVAL) naming the value.
// Single-threaded: one engine per thread. Deliberately not here: file naming, cleanup and
// accounting (nvme_store.h), registered buffers and SQPOLL (not needed to reach the disk's
// bandwidth at 1 MiB blocks).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

struct io_uring;

namespace strata::offload {

enum class OpenMode { kDirect, kDirectOrBuffered, kBuffered };
enum class Create { kNew, kExisting };  // kNew: O_CREAT | O_EXCL

class UringFile {
 public:
  UringFile() = default;
  // Throws SystemError naming the path and errno text (EACCES, ENOENT, ENOTDIR, EEXIST...).
  UringFile(std::filesystem::path path, Create create, OpenMode mode);
  UringFile(UringFile&& other) noexcept;
  UringFile& operator=(UringFile&& other) noexcept;
  UringFile(const UringFile&) = delete;
  UringFile& operator=(const UringFile&) = delete;
  ~UringFile() { close_noexcept(); }

  int fd() const { return fd_; }
  bool is_open() const { return fd_ >= 0; }
  bool direct() const { return direct_; }  // opened with O_DIRECT
  const std::filesystem::path& path() const { return path_; }
  std::int64_t size_bytes() const;              // fstat
  void truncate(std::int64_t bytes);            // ftruncate
  void allocate(std::int64_t bytes);            // fallocate(0, bytes): reserves the blocks
  void sync();                                  // fdatasync
  void close();                                 // checked close
  void close_noexcept() noexcept;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool direct_ = false;
};

struct IoOptions {
  std::int64_t block_bytes = 1 << 20;  // one submission; a multiple of 4096
  int queue_depth = 16;                // blocks in flight at once
};

struct IoCounters {
  std::int64_t read_bytes = 0;
  std::int64_t written_bytes = 0;
};

class IoEngine {
 public:
  using Ticket = std::uint64_t;

  // Throws ConfigError for a bad block size or queue depth, SystemError when
  // io_uring_queue_init fails (ENOMEM, EPERM where io_uring is disabled).
  explicit IoEngine(IoOptions options = {});
  IoEngine(const IoEngine&) = delete;
  IoEngine& operator=(const IoEngine&) = delete;
  ~IoEngine();  // waits for blocks in flight, then frees the ring

  // Blocking transfers of bytes at offset; buf must stay valid until return.
  void write(UringFile& file, const void* buf, std::int64_t bytes, std::int64_t offset);
  void read(UringFile& file, void* buf, std::int64_t bytes, std::int64_t offset);

  // Asynchronous: buf (and file) must stay valid until wait(ticket) returns (or the engine
  // is destroyed). A failure is thrown by the call that finds it (poll, wait or the next
  // start) after the engine has drained.
  Ticket start_write(UringFile& file, const void* buf, std::int64_t bytes, std::int64_t offset);
  Ticket start_read(UringFile& file, void* buf, std::int64_t bytes, std::int64_t offset);
  void wait(Ticket ticket);
  void wait_all();
  void poll();  // submit queued blocks, reap finished ones; never blocks

  const IoOptions& options() const { return options_; }
  IoCounters counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }

 private:
  enum class Op { kRead, kWrite };
  struct Block {
    UringFile* file;
    Op op;
    std::byte* buf;
    std::int64_t bytes;
    std::int64_t offset;
    Ticket ticket;
  };
  Ticket start(Op op, UringFile& file, std::byte* buf, std::int64_t bytes, std::int64_t offset);
  void submit_pending(bool wait_for_one);
  void reap(bool block);
  void complete(std::size_t slot, int result);
  void fail(std::string message);
  void drain_noexcept() noexcept;
  bool ticket_done(Ticket ticket) const;

  IoOptions options_;
  std::unique_ptr<io_uring> ring_;
  std::deque<Block> pending_;        // not yet submitted
  std::vector<Block> slots_;         // in flight, indexed by user_data
  std::vector<std::size_t> free_slots_;
  int in_flight_ = 0;
  Ticket next_ticket_ = 1;
  std::map<Ticket, std::int64_t> open_tickets_;  // ticket -> blocks not yet complete
  std::string error_;                // first failure, thrown once drained
  IoCounters counters_;
};

}  // namespace strata::offload
