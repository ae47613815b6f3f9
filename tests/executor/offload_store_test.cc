// NvmeStore (executor/offload/nvme_store.h): odd-sized tensors round-trip, padded files,
// new tensors read as zeros (reserved or written), aligned and unaligned host pointers,
// nvme-tier accounting, removal at exit, crash cleanup of a dead process's run directory,
// a full disk leaving nothing behind; and the bandwidth probe behind `strata calibrate`.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "cost_model/specs/errors.h"
#include "executor/memory/accounting_allocator.h"
#include "executor/memory/host_pages.h"
#include "executor/offload/nvme_bandwidth.h"
#include "executor/offload/nvme_store.h"
#include "executor/runtime/file_lock.h"
#include "tests/executor/offload_test_util.h"

namespace strata::offload {
namespace {

using testing::files_under;
using testing::ScratchDir;

NvmeStoreOptions small_options(const std::filesystem::path& dir) {
  NvmeStoreOptions o;
  o.dir = dir;
  o.io = IoOptions{8192, 4};
  o.bounce_bytes = 8192;  // two pages: whole-tensor transfers take many bounce rounds
  return o;
}

std::vector<float> iota_floats(std::int64_t n, float start) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = start + 0.25f * static_cast<float>(i);
  return v;
}

TEST(OffloadStore, OddSizedTensorsRoundTripAndFilesArePadded) {
  ScratchDir scratch;
  NvmeStore store(small_options(scratch.path()));
  // 1 float, one float short of a page (1023), one over (1025), and 300001 (many bounce
  // rounds, ending mid-page).
  std::int64_t padded_total = 0;
  for (std::int64_t n : {0, 1, 1023, 1025, 300001}) {
    const std::string name = "t" + std::to_string(n);
    const auto data = iota_floats(n, static_cast<float>(n));
    store.create_from(name, data.data(), n);
    std::vector<float> back(static_cast<std::size_t>(n), -1.0f);
    store.read(name, back.data(), n);
    // (An empty vector's data() may be null, which memcmp must not be given even for 0 bytes.)
    EXPECT_TRUE(std::equal(back.begin(), back.end(), data.begin(), data.end())) << name;
    // File size: n * 4 bytes rounded up to 4096 (e.g. 1025 floats = 4100 bytes -> 8192).
    const std::int64_t padded = (n * 4 + 4095) / 4096 * 4096;
    EXPECT_EQ(std::filesystem::file_size(store.run_dir() / (name + ".f32")),
              static_cast<std::uintmax_t>(padded)) << name;
    padded_total += padded;
  }
  // Written: the values once, padded (create_from writes no zeros first); read: the padded
  // size once.
  EXPECT_EQ(store.counters().written_bytes, padded_total);
  EXPECT_EQ(store.counters().read_bytes, padded_total);
  EXPECT_TRUE(store.direct());
}

TEST(OffloadStore, NvmeBytesAreAccountedWithPeak) {
  ScratchDir scratch;
  TierBudgets budgets;
  budgets.nvme_bytes = 20000;
  AccountingAllocator allocator(budgets);
  {
    NvmeStore store(small_options(scratch.path()), &allocator);
    store.create("a", 1000);  // 4000 bytes
    store.create("b", 3000);  // 12000 bytes
    EXPECT_EQ(allocator.usage(MemoryTier::kNvme).current_bytes, 16000);
    store.remove("b");
    EXPECT_EQ(allocator.usage(MemoryTier::kNvme).current_bytes, 4000);
    EXPECT_EQ(allocator.usage(MemoryTier::kNvme).peak_bytes, 16000);
    // 4000 + 5000 * 4 = 24000 > 20000: over the nvme budget, and no file for it.
    EXPECT_THROW(store.create("c", 5000), OutOfMemory);
    EXPECT_FALSE(std::filesystem::exists(store.run_dir() / "c.f32"));
    EXPECT_EQ(store.stored_bytes(), 4000);
  }
  EXPECT_EQ(allocator.usage(MemoryTier::kNvme).current_bytes, 0);  // released at exit
}

TEST(OffloadStore, RunDirectoryIsPerProcessAndRemovedAtExit) {
  ScratchDir scratch;
  std::filesystem::path run_dir;
  {
    NvmeStore store(small_options(scratch.path()));
    run_dir = store.run_dir();
    store.create("x", 5000);
    EXPECT_EQ(run_dir.parent_path(), scratch.path());
    EXPECT_TRUE(run_dir.filename().string().starts_with("strata-" + std::to_string(::getpid()) + "-"))
        << run_dir;
    EXPECT_EQ(files_under(scratch.path()).size(), 1u);
  }
  EXPECT_FALSE(std::filesystem::exists(run_dir));
  EXPECT_TRUE(files_under(scratch.path()).empty());
}

TEST(OffloadStore, StaleDirectoryOfACrashedProcessIsRemovedAtNextStart) {
  ScratchDir scratch;
  // A child process creates a store with a tensor and dies without running destructors,
  // as a crash would.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      NvmeStore store(small_options(scratch.path()));
      store.create("orphan", 4096);
      ::_exit(0);  // inside the store's scope: its destructor never runs, no cleanup
    } catch (...) {
      ::_exit(3);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  const auto orphans = files_under(scratch.path());
  ASSERT_EQ(orphans.size(), 1u);  // the crashed child's tensor is still there
  const auto stale_dir = orphans[0].parent_path();
  EXPECT_TRUE(stale_dir.filename().string().starts_with("strata-" + std::to_string(child) + "-"));

  // A directory whose lock is held (here by this test, as a live store would) stays.
  const auto live = scratch.path() / "strata-1-keepme";
  std::filesystem::create_directory(live);
  const std::optional<FileLock> held = FileLock::try_acquire(live, false);
  ASSERT_TRUE(held.has_value());

  NvmeStore store(small_options(scratch.path()));
  ASSERT_EQ(store.stale_removed().size(), 1u);
  EXPECT_EQ(store.stale_removed()[0], stale_dir);
  EXPECT_FALSE(std::filesystem::exists(stale_dir));
  EXPECT_TRUE(std::filesystem::exists(live));
}

// Liveness is the lock, never the pid in the name: a run in another PID namespace (a
// container) or on another node sharing the directory has a pid that means nothing here.
// The old rule deleted such a live directory (its pid was dead here) and kept a dead one
// whose pid number happened to be alive here.
TEST(OffloadStore, CleanupDecidesByTheLockNotByThePid) {
  ScratchDir scratch;
  // Live elsewhere: pid 999999999 exists in no namespace of this machine, but its lock is held.
  const auto elsewhere = scratch.path() / "strata-999999999-abcdef";
  std::filesystem::create_directory(elsewhere);
  std::ofstream(elsewhere / "w.f32") << "data";
  const std::optional<FileLock> held = FileLock::try_acquire(elsewhere, false);
  ASSERT_TRUE(held.has_value());
  // Dead, though its pid (this process's) is alive: nobody holds its lock.
  const auto dead = scratch.path() / ("strata-" + std::to_string(::getpid()) + "-zzzzzz");
  std::filesystem::create_directory(dead);
  // Not a run directory's name: never touched.
  const auto other = scratch.path() / "strata-job-abcdef";
  std::filesystem::create_directory(other);

  EXPECT_EQ(remove_stale_run_dirs(scratch.path()), std::vector<std::filesystem::path>{dead});
  EXPECT_TRUE(std::filesystem::exists(elsewhere / "w.f32"));
  EXPECT_TRUE(std::filesystem::exists(other));
  // A live store's own directory is locked: a second store beside it leaves it alone.
  NvmeStore first(small_options(scratch.path()));
  first.create("t", 1024);
  NvmeStore second(small_options(scratch.path()));
  EXPECT_TRUE(second.stale_removed().empty());
  EXPECT_TRUE(std::filesystem::exists(first.run_dir() / "t.f32"));
  // The store's lock is exclusive while it lives.
  EXPECT_FALSE(FileLock::try_acquire(first.run_dir(), false).has_value());
}

TEST(OffloadStore, UnwritableNvmeDirIsASystemErrorNamingIt) {
  ScratchDir scratch;
  const auto blocker = scratch.path() / "plain";
  { UringFile f(blocker, Create::kNew, OpenMode::kBuffered); }
  // A directory below a regular file cannot be made, even by root (ENOTDIR / EEXIST).
  const auto dir = blocker / "nvme";
  try {
    NvmeStore store(small_options(dir));
    FAIL() << "expected a SystemError";
  } catch (const SystemError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("mkdir"), std::string::npos) << m;
    EXPECT_NE(m.find(dir.string()), std::string::npos) << m;
  }
  EXPECT_EQ(files_under(scratch.path()).size(), 1u);  // only the blocker file itself
}

TEST(OffloadStore, NewTensorsAreZerosWhetherTheirBlocksAreReservedOrWritten) {
  // 1025 floats (4100 bytes: two pages) and 300001 (1200004 bytes: 293 pages).
  for (Preallocate how : {Preallocate::kFallocate, Preallocate::kWriteZeros}) {
    const bool reserved = how == Preallocate::kFallocate;
    SCOPED_TRACE(reserved ? "fallocate" : "written zeros");
    ScratchDir scratch;
    NvmeStoreOptions options = small_options(scratch.path());
    options.preallocate = how;
    NvmeStore store(options);
    std::int64_t padded_total = 0;
    for (std::int64_t n : {1025, 300001}) {
      const std::string name = "z" + std::to_string(n);
      store.create(name, n);
      std::vector<float> back(static_cast<std::size_t>(n), -1.0f);
      store.read(name, back.data(), n);
      EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](float x) { return x == 0.0f; })) << name;
      const std::int64_t padded = (n * 4 + 4095) / 4096 * 4096;
      EXPECT_EQ(std::filesystem::file_size(store.run_dir() / (name + ".f32")),
                static_cast<std::uintmax_t>(padded));
      padded_total += padded;
    }
    // Reserved blocks are not written (this filesystem has fallocate: ext4 or tmpfs here);
    // written zeros are the padded sizes.
    EXPECT_EQ(store.counters().written_bytes, reserved ? 0 : padded_total);
  }
}

TEST(OffloadStore, AlignedAndUnalignedHostPointersRoundTripEveryTail) {
  ScratchDir scratch;
  NvmeStore store(small_options(scratch.path()));  // 8 KiB blocks, 4 in flight, 8 KiB bounce
  // Page-aligned memory (as the host tiers' tensors are); +1 float is unaligned.
  const std::int64_t most = 300001 + 2;  // the shift and the sentinel past the end
  HostPages src(most * 4, false), dst(most * 4, false);
  testing::fill_pattern(src.as<std::byte>(), most * 4, 7);
  for (std::int64_t n : {1, 1023, 1024, 1025, 300001}) {
    for (int src_shift : {0, 1}) {
      for (int dst_shift : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << n << " floats, src +" << src_shift << ", dst +" << dst_shift);
        const std::string name = "t" + std::to_string(n) + "_" + std::to_string(src_shift) +
                                 std::to_string(dst_shift);
        const float* from = src.as<float>() + src_shift;
        store.create_from(name, from, n);
        float* to = dst.as<float>() + dst_shift;
        std::fill(to, to + n, -1.0f);
        to[n] = 42.0f;  // one past the tensor: a padded tail read into dst would overwrite it
        store.read(name, to, n);
        EXPECT_EQ(std::memcmp(to, from, static_cast<std::size_t>(n) * 4), 0);
        EXPECT_EQ(to[n], 42.0f);
        store.remove(name);
      }
    }
  }
}

TEST(OffloadStore, FullDiskDuringCreateLeavesNoFileBehind) {
  // A full disk fails at fallocate where the filesystem reserves blocks, or at the first
  // write of the zeros where it does not; both leave nothing behind.
  for (Preallocate how : {Preallocate::kFallocate, Preallocate::kWriteZeros}) {
    const bool reserved = how == Preallocate::kFallocate;
    SCOPED_TRACE(reserved ? "fallocate" : "written zeros");
    ScratchDir scratch;
    AccountingAllocator allocator;
    std::filesystem::path run_dir;
    {
      NvmeStoreOptions options = small_options(scratch.path());
      options.preallocate = how;
      NvmeStore store(options, &allocator);
      run_dir = store.run_dir();
      store.create("fits", 1024);  // one page: under the cap
      std::string m;
      std::string from_values;
      {
        // Files capped at 64 KiB: a 1 MiB tensor (262144 floats) fails with EFBIG, as a
        // full disk fails with ENOSPC; so does one created from values.
        testing::ScopedFileSizeLimit limit(64 << 10);
        try {
          store.create("big", 262144);
          ADD_FAILURE() << "expected a SystemError";
        } catch (const SystemError& e) {
          m = e.what();
        }
        const std::vector<float> values(262144, 1.0f);
        try {
          store.create_from("big_values", values.data(), 262144);
          ADD_FAILURE() << "expected a SystemError";
        } catch (const SystemError& e) {
          from_values = e.what();
        }
      }
      EXPECT_NE(m.find("big.f32"), std::string::npos) << m;
      EXPECT_NE(m.find(reserved ? "fallocate" : "io_uring write"), std::string::npos) << m;
      if (!reserved) {
        EXPECT_NE(m.find("at offset"), std::string::npos) << m;
      }
      EXPECT_NE(m.find("File too large"), std::string::npos) << m;
      EXPECT_NE(from_values.find("big_values.f32"), std::string::npos) << from_values;
      EXPECT_NE(from_values.find("File too large"), std::string::npos) << from_values;
      for (const char* name : {"big", "big_values"}) {
        EXPECT_FALSE(store.contains(name)) << name;
        EXPECT_FALSE(std::filesystem::exists(run_dir / (std::string(name) + ".f32"))) << name;
      }
      EXPECT_EQ(allocator.usage(MemoryTier::kNvme).current_bytes, 1024 * 4);  // both released
    }
    EXPECT_TRUE(files_under(scratch.path()).empty());
  }
}

TEST(OffloadStore, BadNamesAndCountsAreRejected) {
  ScratchDir scratch;
  NvmeStore store(small_options(scratch.path()));
  EXPECT_THROW(store.create("../escape", 4), std::invalid_argument);
  EXPECT_THROW(store.create("", 4), std::invalid_argument);
  store.create("ok", 4);
  EXPECT_THROW(store.create("ok", 4), std::invalid_argument);
  std::vector<float> five(5);
  EXPECT_THROW(store.write("ok", five.data(), 5), std::invalid_argument);
  EXPECT_THROW(store.read("missing", five.data(), 5), std::invalid_argument);
}

TEST(OffloadBandwidth, MeasuresBothDirectionsAndLeavesNothing) {
  ScratchDir scratch;
  // 8 MiB in 1 MiB blocks, 4 deep: small enough for CI, large enough to time.
  const NvmeBandwidth bw = measure_nvme_bandwidth(scratch.path(), 8 << 20, 1 << 20, 4);
  EXPECT_GT(bw.write_bytes_per_s, 0.0);
  EXPECT_GT(bw.read_bytes_per_s, 0.0);
  EXPECT_EQ(bw.file_bytes, 8 << 20);
  EXPECT_TRUE(files_under(scratch.path()).empty());
  EXPECT_THROW(measure_nvme_bandwidth(scratch.path(), (8 << 20) + 4096, 1 << 20, 4),
               ConfigError);  // not a whole number of blocks
}

}  // namespace
}  // namespace strata::offload
