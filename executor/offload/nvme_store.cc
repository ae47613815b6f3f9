// NvmeStore: run directory, named padded tensor files, accounting and crash cleanup (see
// nvme_store.h).
#include "executor/offload/nvme_store.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <system_error>

#include "cost_model/specs/errors.h"

namespace strata::offload {
namespace {

constexpr std::string_view kRunDirPrefix = "strata-";
constexpr std::int64_t kFloatBytes = static_cast<std::int64_t>(sizeof(float));


bool valid_name(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
  });
}

// mkdir -p for the store's parent directory, each failure named.
void make_dirs(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw SystemError(fmt::format("mkdir of nvme dir '{}' failed: {} (errno {})", dir.string(),
                                  ec.message(), ec.value()));
  }
}

}  // namespace

std::vector<std::filesystem::path> remove_stale_run_dirs(const std::filesystem::path& dir) {
  return remove_unlocked_dirs(dir, std::string(kRunDirPrefix));
}

NvmeStore::NvmeStore(NvmeStoreOptions options, AccountingAllocator* allocator)
    : options_(std::move(options)),
      allocator_(allocator),
      bounce_(options_.bounce_bytes > 0 && is_aligned(options_.bounce_bytes)
                  ? options_.bounce_bytes
                  : throw ConfigError(fmt::format(
                        "nvme store: bounce_bytes = {}; expected a positive multiple of {}",
                        options_.bounce_bytes, kDirectIoAlignment))),
      engine_(options_.io) {
  make_dirs(options_.dir);
  stale_removed_ = remove_stale_run_dirs(options_.dir);
  // A fresh, unique, locked directory even when another process (here or in another PID
  // namespace) or another store in this process shares the parent.
  run_dir_lock_.emplace(options_.dir, std::string(kRunDirPrefix));
  run_dir_ = run_dir_lock_->path();
}

NvmeStore::~NvmeStore() { remove_all_noexcept(); }

void NvmeStore::remove_all_noexcept() noexcept {
  try {
    engine_.wait_all();
  } catch (...) {
    // A failed transfer during teardown: the files are being removed anyway.
  }
  for (auto& [name, tensor] : tensors_) tensor.file.close_noexcept();
  tensors_.clear();
  std::error_code ec;
  if (!run_dir_.empty()) std::filesystem::remove_all(run_dir_, ec);
}

NvmeStore::Tensor& NvmeStore::at(const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    throw std::invalid_argument(
        fmt::format("nvme store '{}': no tensor named '{}'", run_dir_.string(), name));
  }
  return it->second;
}

const NvmeStore::Tensor& NvmeStore::at(const std::string& name) const {
  return const_cast<NvmeStore*>(this)->at(name);
}

void NvmeStore::create(const std::string& name, std::int64_t count) { add(name, count, nullptr); }

void NvmeStore::create_from(const std::string& name, const float* src, std::int64_t count) {
  if (src == nullptr && count > 0) {
    throw std::invalid_argument(fmt::format("nvme store: create_from of '{}' with no values", name));
  }
  add(name, count, src);
}

void NvmeStore::add(const std::string& name, std::int64_t count, const float* values) {
  if (!valid_name(name)) {
    throw std::invalid_argument(fmt::format(
        "nvme store: tensor name '{}'; expected a plain file name of [A-Za-z0-9._-]", name));
  }
  if (tensors_.contains(name)) {
    throw std::invalid_argument(fmt::format("nvme store: tensor '{}' already exists", name));
  }
  if (count < 0) {
    throw std::invalid_argument(
        fmt::format("nvme store: tensor '{}' count = {}; expected >= 0", name, count));
  }
  Tensor tensor;
  tensor.count = count;
  if (allocator_ != nullptr) {
    tensor.reservation = allocator_->reserve(MemoryTier::kNvme, count * kFloatBytes,
                                             "nvme:" + name);
  }
  const std::filesystem::path path = run_dir_ / (name + ".f32");
  tensor.file = UringFile(path, Create::kNew, options_.open_mode);
  const bool direct = tensor.file.direct();
  tensors_.emplace(name, std::move(tensor));
  try {
    // Values written over zeros would write the tensor twice: they reserve their blocks
    // (fallocate, when asked) or allocate them as they are written.
    const std::int64_t padded = round_up_to_alignment(count * kFloatBytes);
    if (values == nullptr) {
      preallocate(at(name).file, padded);
    } else {
      if (options_.preallocate == Preallocate::kFallocate) reserve_blocks(at(name).file, padded);
      write(name, values, count);
    }
  } catch (...) {
    // The engine drained whatever it had in flight before it threw (io_uring_file.h).
    Tensor& failed = at(name);
    failed.file.close_noexcept();
    tensors_.erase(name);  // its reservation released
    std::error_code ec;
    std::filesystem::remove(path, ec);
    throw;
  }
  if (!direct) direct_ = false;
}

void NvmeStore::remove(const std::string& name) {
  Tensor& tensor = at(name);
  engine_.wait_all();  // no block of this file may still be in flight
  const std::filesystem::path path = tensor.file.path();
  tensor.file.close();
  tensors_.erase(name);
  std::error_code ec;
  if (!std::filesystem::remove(path, ec) || ec) {
    throw SystemError(fmt::format("unlink of '{}' failed: {} (errno {})", path.string(),
                                  ec ? ec.message() : "not found", ec.value()));
  }
}

bool NvmeStore::reserve_blocks(UringFile& file, std::int64_t padded_bytes) {
  // Not ftruncate's holes: the blocks are reserved here, so a full disk shows at creation
  // and later tile writes never allocate; reads of reserved, unwritten blocks give zeros.
  if (padded_bytes == 0) return true;
  if (::fallocate(file.fd(), 0, 0, static_cast<off_t>(padded_bytes)) == 0) return true;
  const int err = errno;
  if (err == EOPNOTSUPP) return false;
  throw SystemError(fmt::format("fallocate of '{}' ({} bytes) failed: {} (errno {})",
                                file.path().string(), padded_bytes, std::strerror(err), err));
}

void NvmeStore::preallocate(UringFile& file, std::int64_t padded_bytes) {
  if (options_.preallocate == Preallocate::kFallocate && reserve_blocks(file, padded_bytes)) return;
  write_zeros(file, padded_bytes);
}

void NvmeStore::write_zeros(UringFile& file, std::int64_t padded_bytes) {
  // Every write reads the same zeroed bounce buffer, so all of them can be in flight.
  std::memset(bounce_.data(), 0, static_cast<std::size_t>(bounce_.bytes()));
  for (std::int64_t off = 0; off < padded_bytes; off += bounce_.bytes()) {
    engine_.start_write(file, bounce_.data(), std::min(bounce_.bytes(), padded_bytes - off), off);
  }
  engine_.wait_all();
}

std::int64_t NvmeStore::count(const std::string& name) const { return at(name).count; }

UringFile& NvmeStore::file(const std::string& name) { return at(name).file; }

std::int64_t NvmeStore::stored_bytes() const {
  std::int64_t total = 0;
  for (const auto& [name, tensor] : tensors_) total += tensor.count * kFloatBytes;
  return total;
}

namespace {

bool page_aligned(const void* p) {
  return is_aligned(static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p)));
}

}  // namespace

void NvmeStore::write(const std::string& name, const float* src, std::int64_t count) {
  Tensor& tensor = at(name);
  if (count != tensor.count || (src == nullptr && count > 0)) {
    throw std::invalid_argument(fmt::format("nvme store: write of '{}' with {} floats; the "
                                            "tensor has {}", name, count, tensor.count));
  }
  const std::int64_t bytes = count * kFloatBytes;
  const auto* from = reinterpret_cast<const std::byte*>(src);
  // Straight from an aligned source: its whole pages at once; the bounce below takes the
  // rest (the last partial page, with the file's zero padding after it).
  const std::int64_t direct = page_aligned(src) ? bytes / kDirectIoAlignment * kDirectIoAlignment : 0;
  const IoEngine::Ticket ticket = direct > 0 ? engine_.start_write(tensor.file, src, direct, 0) : 0;
  for (std::int64_t off = direct; off < bytes; off += bounce_.bytes()) {
    const std::int64_t len = std::min(bounce_.bytes(), bytes - off);
    std::memcpy(bounce_.data(), from + off, static_cast<std::size_t>(len));
    const std::int64_t padded = round_up_to_alignment(len);
    std::memset(bounce_.bytes_ptr() + len, 0, static_cast<std::size_t>(padded - len));
    engine_.write(tensor.file, bounce_.data(), padded, off);
  }
  if (ticket != 0) engine_.wait(ticket);
}

void NvmeStore::read(const std::string& name, float* dst, std::int64_t count) {
  Tensor& tensor = at(name);
  if (count != tensor.count || (dst == nullptr && count > 0)) {
    throw std::invalid_argument(fmt::format("nvme store: read of '{}' into {} floats; the "
                                            "tensor has {}", name, count, tensor.count));
  }
  const std::int64_t bytes = count * kFloatBytes;
  auto* to = reinterpret_cast<std::byte*>(dst);
  // Straight into an aligned destination, all its whole pages at once (see write()).
  const std::int64_t direct = page_aligned(dst) ? bytes / kDirectIoAlignment * kDirectIoAlignment : 0;
  const IoEngine::Ticket ticket = direct > 0 ? engine_.start_read(tensor.file, dst, direct, 0) : 0;
  for (std::int64_t off = direct; off < bytes; off += bounce_.bytes()) {
    const std::int64_t len = std::min(bounce_.bytes(), bytes - off);
    engine_.read(tensor.file, bounce_.data(), round_up_to_alignment(len), off);
    std::memcpy(to + off, bounce_.data(), static_cast<std::size_t>(len));
  }
  if (ticket != 0) engine_.wait(ticket);
}

}  // namespace strata::offload
