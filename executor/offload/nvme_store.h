// NvmeStore: the NVMe tier of one process: named fp32 tensors kept as files in a run
// directory of its own, <nvme_dir>/strata-<pid>-XXXXXX, moved with the IoEngine (O_DIRECT,
// io_uring, block-split, queue-deep).
//
// - Files are padded to a multiple of 4096 bytes so every tile read or written with
//   O_DIRECT can be whole blocks; the accounting counts the tensors' own bytes
//   (count * 4), like the AccountingAllocator does for padding.
// - A new tensor's zeros are reserved blocks (fallocate: no bytes written, reads give
//   zeros, a full disk fails at creation) where the filesystem can, else written.
// - Whole-tensor transfers from or to a page-aligned host pointer go straight between it
//   and the file, every block of them in flight at once (the engine's queue depth); only
//   the last partial page, and any unaligned pointer, go through the bounce buffer. Set-up
//   wrote gpt-8b-sized state 8 MiB at a time through one bounce buffer, and wrote every
//   tensor twice (its zeros, then its values).
// - Cleanup: the destructor removes the run directory and everything in it. A process that
//   crashed cannot, so the constructor removes every strata-<n>-XXXXXX directory under
//   nvme_dir that nobody holds (file_lock.h) and lists them in stale_removed(). Liveness is
//   the lock, never the pid in the name: a pid means nothing in another PID namespace (a
//   container) or on another node sharing the directory, where a live run's directory was
//   once deleted. The store holds an exclusive flock on its run directory for its whole
//   life (a LockedDir, locked_dir.h, which also says how it is made without a moment
//   unlocked).
// - Accounting: with an allocator, each tensor holds a Reservation on the nvme tier, so a
//   run's peak NVMe bytes are measured (and a tensor over the nvme budget is OutOfMemory).
// - Counters: bytes read and written through the store since reset_counters() (per step).
// - Failures (mkdir of an unwritable directory, ENOSPC/EFBIG while writing, short reads)
//   throw SystemError naming the file, the operation, the offset and the errno text; a
//   tensor whose creation failed leaves no file behind.
// Deliberately not here: the optimizer (cpu_adam_stream.h), prefetch policy, fp16 copies.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "executor/memory/accounting_allocator.h"
#include "executor/offload/aligned_buffer.h"
#include "executor/offload/io_uring_file.h"
#include "executor/runtime/locked_dir.h"

namespace strata::offload {

// How create() makes a new tensor's zeros.
enum class Preallocate {
  kFallocate,   // fallocate (reserved, unwritten blocks), or kWriteZeros where unsupported
  kWriteZeros,  // zeros written through the I/O path, every block in flight
};

struct NvmeStoreOptions {
  std::filesystem::path dir = "/tmp/strata-nvme";  // --nvme-dir
  IoOptions io{};
  // kDirectOrBuffered: O_DIRECT where the filesystem takes it, else buffered; direct() says
  // which (a benchmark must print it). kDirect: refuse to run without O_DIRECT.
  OpenMode open_mode = OpenMode::kDirectOrBuffered;
  // Host bytes of the bounce buffer used by write()/read() of whole tensors from any
  // (unaligned) host pointer; a multiple of 4096.
  std::int64_t bounce_bytes = 8 << 20;
  Preallocate preallocate = Preallocate::kFallocate;
};

class NvmeStore {
 public:
  // allocator: optional (nullptr: no accounting); must outlive the store.
  explicit NvmeStore(NvmeStoreOptions options, AccountingAllocator* allocator = nullptr);
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;
  ~NvmeStore();  // closes and removes every file and the run directory

  // A new tensor of count floats (zeros on disk). Throws SystemError on I/O failure,
  // OutOfMemory over the nvme budget, std::invalid_argument for a duplicate name or a name
  // that is not a plain file name ([A-Za-z0-9._-]+).
  void create(const std::string& name, std::int64_t count);
  // A new tensor holding count floats from src (written once: no zeros first); the
  // common way to move a host tensor to NVMe.
  void create_from(const std::string& name, const float* src, std::int64_t count);
  void remove(const std::string& name);
  bool contains(const std::string& name) const { return tensors_.contains(name); }
  std::int64_t count(const std::string& name) const;  // floats

  // Whole-tensor transfers from/to any host pointer (straight from or into a page-aligned
  // one, through the bounce buffer otherwise).
  void write(const std::string& name, const float* src, std::int64_t count);
  void read(const std::string& name, float* dst, std::int64_t count);

  // For tiled streaming (cpu_adam_stream): the tensor's file; offsets and lengths passed to
  // the engine must be multiples of 4096 (files are padded, so the last tile may round up).
  UringFile& file(const std::string& name);
  IoEngine& engine() { return engine_; }

  bool direct() const { return direct_; }  // every file so far opened with O_DIRECT
  const std::filesystem::path& run_dir() const { return run_dir_; }
  const std::vector<std::filesystem::path>& stale_removed() const { return stale_removed_; }
  std::int64_t stored_bytes() const;  // sum of count * 4 over tensors
  IoCounters counters() const { return engine_.counters(); }
  void reset_counters() { engine_.reset_counters(); }

 private:
  struct Tensor {
    UringFile file;
    std::int64_t count = 0;
    Reservation reservation;
  };
  Tensor& at(const std::string& name);
  // create() and create_from() (values: nullptr for zeros); a failure leaves no file and
  // no reservation behind.
  void add(const std::string& name, std::int64_t count, const float* values);
  // A new file's zeros, padded_bytes of them (see Preallocate).
  void preallocate(UringFile& file, std::int64_t padded_bytes);
  // fallocate of padded_bytes; false where the filesystem has none (EOPNOTSUPP).
  bool reserve_blocks(UringFile& file, std::int64_t padded_bytes);
  void write_zeros(UringFile& file, std::int64_t padded_bytes);
  const Tensor& at(const std::string& name) const;
  void remove_all_noexcept() noexcept;

  NvmeStoreOptions options_;
  AccountingAllocator* allocator_;
  std::vector<std::filesystem::path> stale_removed_;
  std::optional<LockedDir> run_dir_lock_;  // owns run_dir_: locked, removed last
  std::filesystem::path run_dir_;
  bool direct_ = true;
  std::map<std::string, Tensor> tensors_;
  AlignedBuffer bounce_;  // declared before engine_: the engine drains before it is freed
  IoEngine engine_;
};

// Removes the strata-<n>-XXXXXX run directories under dir whose lock it can take (their
// stores are gone), and .strata-new-* ones a minute old; returns them. A missing dir is not
// an error (nothing to clean). Used by NvmeStore's constructor and by `strata run` after a
// job whose ranks may have been killed.
std::vector<std::filesystem::path> remove_stale_run_dirs(const std::filesystem::path& dir);

}  // namespace strata::offload
