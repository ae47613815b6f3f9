// Fresh host pages (executor/memory/host_pages.h): a mapping reads as zeros, and
// populate_on_every_thread faults every page of it in, at one thread and at several (each
// thread its own part: a part skipped or cut short leaves pages out), keeping what was
// written before.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/mman.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "executor/memory/host_pages.h"
#include "tests/executor/omp_threads.h"

namespace strata {
namespace {

// How many of the mapping's pages are resident (mincore).
std::int64_t resident_pages(const HostPages& pages) {
  const std::int64_t page = host_page_bytes();
  std::vector<unsigned char> in(static_cast<std::size_t>(pages.mapped() / page));
  EXPECT_EQ(mincore(pages.data(), static_cast<size_t>(pages.mapped()), in.data()), 0);
  std::int64_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

using Threads = testing_support::ScopedThreads;

TEST(HostPages, PopulateFaultsInEveryPageAtAnyThreadCountAndKeepsTheContents) {
  const std::int64_t page = host_page_bytes();
  // 5 MiB + 3 pages: parts are whole 2 MiB ([0, 4 MiB) and the rest at 2 threads; 2 MiB
  // each at 3), so the last part ends short, in the middle of a huge page.
  const std::int64_t bytes = (std::int64_t{5} << 20) + 3 * page;
  for (int threads : {1, 2, 3}) {
    for (bool huge : {false, true}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, huge " << huge);
      const Threads t(threads);
      HostPages pages(bytes, huge);
      ASSERT_EQ(pages.mapped(), bytes);  // already whole pages
      auto* b = pages.as<unsigned char>();
      b[7] = 0x5a;            // first page
      b[bytes - 1] = 0xa5;    // last page
      populate_on_every_thread(pages.data(), pages.mapped());
      EXPECT_EQ(resident_pages(pages), bytes / page);
      EXPECT_EQ(b[7], 0x5a);
      EXPECT_EQ(b[bytes - 1], 0xa5);
      std::int64_t nonzero = 0;
      for (std::int64_t i = 0; i < bytes; ++i) nonzero += b[i] != 0;
      EXPECT_EQ(nonzero, 2);  // a fresh mapping is zero but for the two bytes written
    }
  }
}

TEST(HostPages, SizesRoundUpToWholePagesAndBadArgumentsAreRejected) {
  const std::int64_t page = host_page_bytes();
  EXPECT_EQ(mapped_bytes(1), page);
  EXPECT_EQ(mapped_bytes(page + 1), 2 * page);
  HostPages pages(page + 1, false);
  EXPECT_EQ(pages.bytes(), page + 1);
  EXPECT_EQ(pages.mapped(), 2 * page);
  // Not whole pages: a part would start or end inside one.
  EXPECT_THROW(populate_on_every_thread(pages.data(), page + 1), std::invalid_argument);
  EXPECT_THROW(populate_on_every_thread(pages.as<char>() + 1, page), std::invalid_argument);
  EXPECT_THROW(HostPages(0, false), std::invalid_argument);
  HostPages moved = std::move(pages);
  EXPECT_TRUE(pages.empty());  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_EQ(moved.bytes(), page + 1);
}

}  // namespace
}  // namespace strata
