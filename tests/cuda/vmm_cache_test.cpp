// VmmBufferCache: a buffer is mapped once per (exporter, buffer id) and reused whatever fd comes
// with later opens; failures and bad requests are reported and not cached; everything mapped is
// unmapped (explicitly, on clear, on destruction) with the size it was mapped with.
#include "kvtier/kernels/cuda/vmm_cache.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kvtier::kernels::cuda {
namespace {

// Records what the cache asks of it; fd 13 fails to open. The address is derived from the fd.
struct OpenerLog {
  std::vector<int> opened_fds;
  std::vector<std::pair<std::uintptr_t, std::size_t>> closed;
};

class FakeOpener final : public VmmOpener {
 public:
  explicit FakeOpener(OpenerLog& log) : log_(log) {}
  Result<std::uintptr_t> open(int fd, std::size_t /*bytes*/) override {
    log_.opened_fds.push_back(fd);
    if (fd == 13) {
      return make_error(Errc::kUnavailable, "cuMemImportFromShareableHandle: fake failure");
    }
    return 0x100000u * (static_cast<std::uintptr_t>(fd) + 1);
  }
  void close(std::uintptr_t address, std::size_t bytes) noexcept override {
    log_.closed.emplace_back(address, bytes);
  }

 private:
  OpenerLog& log_;
};

constexpr std::size_t kBytes = 2 << 20;
constexpr VmmBufferKey kKey{4242, 1};

TEST(VmmBufferCache, MapsABufferOnceAndReturnsTheSameAddressForLaterFds) {
  OpenerLog log;
  VmmBufferCache cache(std::make_unique<FakeOpener>(log));
  const auto first = cache.open(kKey, 5, kBytes);
  ASSERT_TRUE(first);
  const auto again = cache.open(kKey, 9, kBytes);  // a fresh receive of the same buffer
  ASSERT_TRUE(again);
  EXPECT_EQ(*first, *again);
  EXPECT_EQ(log.opened_fds, std::vector<int>{5});
  EXPECT_EQ(cache.open_calls(), 1u);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(VmmBufferCache, AnOpenBufferNeedsNoFd) {
  OpenerLog log;
  VmmBufferCache cache(std::make_unique<FakeOpener>(log));
  ASSERT_TRUE(cache.open(kKey, 5, kBytes));
  EXPECT_TRUE(cache.open(kKey, -1, kBytes));
  EXPECT_EQ(cache.open_calls(), 1u);
}

TEST(VmmBufferCache, KeysDifferingInExporterOrBufferAreDistinctBuffers) {
  OpenerLog log;
  VmmBufferCache cache(std::make_unique<FakeOpener>(log));
  ASSERT_TRUE(cache.open(kKey, 5, kBytes));
  ASSERT_TRUE(cache.open(VmmBufferKey{kKey.exporter + 1, kKey.buffer}, 6, kBytes));
  ASSERT_TRUE(cache.open(VmmBufferKey{kKey.exporter, kKey.buffer + 1}, 7, kBytes));
  EXPECT_EQ(cache.open_calls(), 3u);
  EXPECT_EQ(cache.size(), 3u);
}

TEST(VmmBufferCache, AFailedOpenIsReportedNotCachedAndRetriedNextTime) {
  OpenerLog log;
  VmmBufferCache cache(std::make_unique<FakeOpener>(log));
  const auto failed = cache.open(kKey, 13, kBytes);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, Errc::kUnavailable);
  EXPECT_NE(failed.error().message.find("fake failure"), std::string::npos);
  EXPECT_FALSE(cache.contains(kKey));
  EXPECT_TRUE(cache.open(kKey, 5, kBytes));  // the exporter sent a good fd this time
  EXPECT_EQ(cache.open_calls(), 2u);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(VmmBufferCache, ABufferNotOpenWithoutAnFdIsRejectedWithoutCallingTheOpener) {
  OpenerLog log;
  VmmBufferCache cache(std::make_unique<FakeOpener>(log));
  const auto opened = cache.open(kKey, -1, kBytes);
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().code, Errc::kInvalidArgument);
  EXPECT_NE(opened.error().message.find("no fd"), std::string::npos);
  EXPECT_EQ(cache.open_calls(), 0u);
}

TEST(VmmBufferCache, AZeroByteBufferIsRejected) {
  OpenerLog log;
  VmmBufferCache cache(std::make_unique<FakeOpener>(log));
  EXPECT_EQ(cache.open(kKey, 5, 0).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(cache.open_calls(), 0u);
}

TEST(VmmBufferCache, ReopeningWithADifferentSizeIsRejectedAndKeepsTheMapping) {
  OpenerLog log;
  VmmBufferCache cache(std::make_unique<FakeOpener>(log));
  const auto first = cache.open(kKey, 5, kBytes);
  ASSERT_TRUE(first);
  const auto resized = cache.open(kKey, 6, 2 * kBytes);
  ASSERT_FALSE(resized);
  EXPECT_EQ(resized.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(cache.open_calls(), 1u);
  EXPECT_EQ(cache.open(kKey, -1, kBytes).value_or(0), *first);
}

TEST(VmmBufferCache, CloseUnmapsOneBufferWithItsSizeAndReportsUnknownKeys) {
  OpenerLog log;
  VmmBufferCache cache(std::make_unique<FakeOpener>(log));
  const auto address = cache.open(kKey, 5, kBytes);
  ASSERT_TRUE(address);
  ASSERT_TRUE(cache.close(kKey));
  ASSERT_EQ(log.closed.size(), 1u);
  EXPECT_EQ(log.closed[0].first, *address);
  EXPECT_EQ(log.closed[0].second, kBytes);
  const auto unknown = cache.close(kKey);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, Errc::kNotFound);
  ASSERT_TRUE(cache.open(kKey, 6, kBytes));  // mapped again after a close
  EXPECT_EQ(cache.open_calls(), 2u);
}

TEST(VmmBufferCache, ClearAndDestructionUnmapEverythingStillOpen) {
  OpenerLog log;
  {
    VmmBufferCache cache(std::make_unique<FakeOpener>(log));
    ASSERT_TRUE(cache.open(kKey, 5, kBytes));
    ASSERT_TRUE(cache.open(VmmBufferKey{kKey.exporter, 2}, 6, kBytes));
    cache.clear();
    EXPECT_EQ(log.closed.size(), 2u);
    EXPECT_EQ(cache.size(), 0u);
    ASSERT_TRUE(cache.open(kKey, 7, kBytes));
  }
  EXPECT_EQ(log.closed.size(), 3u);
}

}  // namespace
}  // namespace kvtier::kernels::cuda
