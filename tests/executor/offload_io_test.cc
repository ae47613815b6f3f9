// The NVMe tier's I/O path (executor/offload/io_uring_file.h): round trips through io_uring
// at several sizes and offsets, async tickets, and every fault path a run can hit (O_DIRECT
// misalignment, short read, unwritable directory, full disk), each a SystemError naming the
// file, the operation and the offset.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <string>

#include "cost_model/specs/errors.h"
#include "executor/offload/aligned_buffer.h"
#include "executor/offload/io_uring_file.h"
#include "tests/executor/offload_test_util.h"

namespace strata::offload {
namespace {

using testing::fill_pattern;
using testing::ScratchDir;

// Runs f, expects a SystemError, returns its message.
template <typename F>
std::string system_error_of(F&& f) {
  try {
    f();
  } catch (const SystemError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a SystemError";
  return {};
}

TEST(OffloadIo, DirectRoundTripAtSeveralSizesAndOffsets) {
  ScratchDir scratch;
  UringFile file(scratch.path() / "a.bin", Create::kNew, OpenMode::kDirect);
  ASSERT_TRUE(file.direct()) << "ext4/xfs take O_DIRECT; this machine's /tmp should";
  // 8 KiB blocks, queue depth 4: a 1 MiB transfer is 128 blocks, 4 in flight at a time.
  IoEngine io(IoOptions{8192, 4});
  struct Case {
    std::int64_t bytes;
    std::int64_t offset;
  };
  // Aligned (O_DIRECT) but otherwise awkward: one page, a partial last block (7 pages =
  // 3 blocks + 1 page), a transfer that spans many blocks and ends mid-block.
  const Case cases[] = {{4096, 0}, {7 * 4096, 5 * 4096}, {(1 << 20) + 3 * 4096, 24 * 4096}};
  std::int64_t moved = 0;
  for (const Case& c : cases) {
    AlignedBuffer out(c.bytes);
    AlignedBuffer in(c.bytes);
    fill_pattern(out.bytes_ptr(), c.bytes, static_cast<std::uint32_t>(c.offset + 1));
    io.write(file, out.data(), c.bytes, c.offset);
    io.read(file, in.data(), c.bytes, c.offset);
    EXPECT_EQ(std::memcmp(out.data(), in.data(), static_cast<std::size_t>(c.bytes)), 0)
        << "bytes " << c.bytes << " at offset " << c.offset;
    moved += c.bytes;
  }
  // Every byte written once and read once (the counters count completed bytes).
  EXPECT_EQ(io.counters().written_bytes, moved);
  EXPECT_EQ(io.counters().read_bytes, moved);
}

TEST(OffloadIo, BufferedRoundTripAtOddSizesAndOffsets) {
  ScratchDir scratch;
  UringFile file(scratch.path() / "b.bin", Create::kNew, OpenMode::kBuffered);
  EXPECT_FALSE(file.direct());
  IoEngine io(IoOptions{4096, 3});
  // Without O_DIRECT nothing need be aligned: 1 byte at offset 1, 10007 bytes (a prime, 3
  // blocks) at offset 4099, and the overlap between them must read back as last written.
  std::vector<std::byte> a(1), b(10007), back(10007);
  fill_pattern(a.data(), 1, 3);
  fill_pattern(b.data(), 10007, 4);
  io.write(file, a.data(), 1, 1);
  io.write(file, b.data(), 10007, 4099);
  std::byte one{};
  io.read(file, &one, 1, 1);
  EXPECT_EQ(one, a[0]);
  io.read(file, back.data(), 10007, 4099);
  EXPECT_EQ(std::memcmp(back.data(), b.data(), b.size()), 0);
  EXPECT_EQ(file.size_bytes(), 4099 + 10007);  // the file ends at the last byte written
}

TEST(OffloadIo, TicketsCompleteInAnyOrder) {
  ScratchDir scratch;
  UringFile file(scratch.path() / "c.bin", Create::kNew, OpenMode::kDirect);
  IoEngine io(IoOptions{4096, 2});
  constexpr std::int64_t kPart = 16 * 4096;  // 16 blocks each, more than the queue depth
  AlignedBuffer out(3 * kPart), in(3 * kPart);
  fill_pattern(out.bytes_ptr(), 3 * kPart, 9);
  IoEngine::Ticket t[3];
  for (int i = 0; i < 3; ++i) t[i] = io.start_write(file, out.bytes_ptr() + i * kPart, kPart, i * kPart);
  io.wait(t[2]);  // the last one first: the engine must finish the earlier ones on the way
  io.wait(t[0]);
  io.wait(t[1]);
  for (int i = 0; i < 3; ++i) t[i] = io.start_read(file, in.bytes_ptr() + i * kPart, kPart, i * kPart);
  io.wait_all();
  EXPECT_EQ(std::memcmp(out.data(), in.data(), 3 * kPart), 0);
}

TEST(OffloadIo, DirectMisalignmentIsCaughtBeforeSubmitting) {
  ScratchDir scratch;
  const auto path = scratch.path() / "d.bin";
  UringFile file(path, Create::kNew, OpenMode::kDirect);
  IoEngine io(IoOptions{4096, 4});
  AlignedBuffer buf(3 * 4096);
  // Each of the three O_DIRECT rules broken on its own.
  const std::string address = system_error_of([&] { io.write(file, buf.bytes_ptr() + 1, 4096, 0); });
  const std::string length = system_error_of([&] { io.write(file, buf.data(), 1000, 0); });
  const std::string offset = system_error_of([&] { io.read(file, buf.data(), 4096, 100); });
  for (const std::string& m : {address, length, offset}) {
    EXPECT_NE(m.find(path.string()), std::string::npos) << m;
    EXPECT_NE(m.find("multiples of 4096"), std::string::npos) << m;
  }
  EXPECT_NE(address.find("io_uring write"), std::string::npos) << address;
  EXPECT_NE(offset.find("io_uring read of"), std::string::npos) << offset;
  EXPECT_NE(offset.find("at offset 100"), std::string::npos) << offset;
  EXPECT_EQ(file.size_bytes(), 0);  // nothing reached the file
}

TEST(OffloadIo, ShortReadPastEndOfFileIsAnError) {
  ScratchDir scratch;
  const auto path = scratch.path() / "e.bin";
  UringFile file(path, Create::kNew, OpenMode::kDirect);
  IoEngine io(IoOptions{1 << 20, 8});
  AlignedBuffer buf(4 * 4096);
  io.write(file, buf.data(), 2 * 4096, 0);  // the file is 8192 bytes long
  // Reading 16384: the kernel returns the 8192 there are, the engine asks for the rest at
  // offset 8192 and gets 0 bytes: end of file.
  const std::string m = system_error_of([&] { io.read(file, buf.data(), 4 * 4096, 0); });
  EXPECT_NE(m.find(path.string()), std::string::npos) << m;
  EXPECT_NE(m.find("short read"), std::string::npos) << m;
  EXPECT_NE(m.find("at offset 8192"), std::string::npos) << m;
  // The engine drained and is usable again.
  io.read(file, buf.data(), 2 * 4096, 0);
  EXPECT_EQ(io.counters().read_bytes, 8192 + 8192);
}

TEST(OffloadIo, OpenUnderARegularFileNamesFileAndErrno) {
  // Root ignores permission bits, so "unwritable" is made with a path whose parent is a
  // regular file: open() fails with ENOTDIR for any user.
  ScratchDir scratch;
  const auto blocker = scratch.path() / "plain";
  { UringFile f(blocker, Create::kNew, OpenMode::kBuffered); }
  const auto path = blocker / "x.bin";
  const std::string m =
      system_error_of([&] { UringFile f(path, Create::kNew, OpenMode::kDirect); });
  EXPECT_NE(m.find("open(O_DIRECT)"), std::string::npos) << m;
  EXPECT_NE(m.find(path.string()), std::string::npos) << m;
  EXPECT_NE(m.find("Not a directory"), std::string::npos) << m;
}

TEST(OffloadIo, OpenInReadOnlyDirectoryWhenNotRoot) {
  if (::geteuid() == 0) {
    GTEST_SKIP() << "root bypasses permission bits (CAP_DAC_OVERRIDE); "
                    "OpenUnderARegularFileNamesFileAndErrno covers the error path";
  }
  ScratchDir scratch;
  const auto dir = scratch.path() / "ro";
  std::filesystem::create_directory(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_read |
                                        std::filesystem::perms::owner_exec);
  const std::string m =
      system_error_of([&] { UringFile f(dir / "x.bin", Create::kNew, OpenMode::kDirect); });
  EXPECT_NE(m.find("Permission denied"), std::string::npos) << m;
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
}

TEST(OffloadIo, FileSizeLimitFailsWritesWithEfbig) {
  ScratchDir scratch;
  const auto path = scratch.path() / "f.bin";
  UringFile file(path, Create::kNew, OpenMode::kDirect);
  IoEngine io(IoOptions{1 << 20, 4});
  AlignedBuffer buf(4 << 20);
  std::string m;
  {
    // Files capped at 1 MiB: of the four 1 MiB blocks, those at offsets >= 1 MiB get EFBIG.
    testing::ScopedFileSizeLimit limit(1 << 20);
    m = system_error_of([&] { io.write(file, buf.data(), 4 << 20, 0); });
  }
  EXPECT_NE(m.find("io_uring write"), std::string::npos) << m;
  EXPECT_NE(m.find(path.string()), std::string::npos) << m;
  EXPECT_NE(m.find("File too large"), std::string::npos) << m;
  EXPECT_NE(m.find("at offset"), std::string::npos) << m;
  EXPECT_LE(file.size_bytes(), 1 << 20);  // nothing past the cap was written
}

TEST(OffloadIo, BadEngineOptionsAreConfigErrors) {
  EXPECT_THROW(IoEngine(IoOptions{1000, 4}), ConfigError);     // not a multiple of 4096
  EXPECT_THROW(IoEngine(IoOptions{4096, 0}), ConfigError);     // no queue
}

}  // namespace
}  // namespace strata::offload
