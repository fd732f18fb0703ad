// IpcBufferCache: a handle is opened once and reused, failures are reported and not cached,
// and everything opened is closed (explicitly, on clear, on destruction).
#include "kvtier/kernels/cuda/ipc_cache.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

namespace kvtier::kernels::cuda {
namespace {

// Records what the cache asks of it; handles whose first byte is 0xFF fail to open.
struct OpenerLog {
  int opens = 0;
  std::vector<std::uintptr_t> closed;
};

class FakeOpener final : public IpcOpener {
 public:
  explicit FakeOpener(OpenerLog& log) : log_(log) {}
  Result<std::uintptr_t> open(const IpcHandle& handle) override {
    ++log_.opens;
    if (handle[0] == std::byte{0xFF}) {
      return make_error(Errc::kUnavailable, "cudaIpcOpenMemHandle: fake failure");
    }
    return 0x1000u * (static_cast<std::uintptr_t>(handle[0]) + 1);
  }
  void close(std::uintptr_t address) noexcept override { log_.closed.push_back(address); }

 private:
  OpenerLog& log_;
};

IpcHandle handle_of(std::uint8_t first) {
  IpcHandle handle{};
  handle.fill(std::byte{0x5A});
  handle[0] = static_cast<std::byte>(first);
  return handle;
}

TEST(IpcBufferCache, OpensAHandleOnceAndReturnsTheSameAddressAfterwards) {
  OpenerLog log;
  IpcBufferCache cache(std::make_unique<FakeOpener>(log));
  const auto first = cache.open(handle_of(1));
  ASSERT_TRUE(first);
  const auto again = cache.open(handle_of(1));
  ASSERT_TRUE(again);
  EXPECT_EQ(*first, *again);
  EXPECT_EQ(log.opens, 1);
  EXPECT_EQ(cache.open_calls(), 1u);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(IpcBufferCache, HandlesDifferingInAnyByteAreDistinctBuffers) {
  OpenerLog log;
  IpcBufferCache cache(std::make_unique<FakeOpener>(log));
  IpcHandle other = handle_of(1);
  other[kIpcHandleBytes - 1] = std::byte{0x01};
  ASSERT_TRUE(cache.open(handle_of(1)));
  ASSERT_TRUE(cache.open(other));
  EXPECT_EQ(log.opens, 2);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(IpcBufferCache, AFailedOpenIsReportedNotCachedAndRetriedNextTime) {
  OpenerLog log;
  IpcBufferCache cache(std::make_unique<FakeOpener>(log));
  const auto failed = cache.open(handle_of(0xFF));
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, Errc::kUnavailable);
  EXPECT_NE(failed.error().message.find("fake failure"), std::string::npos);
  EXPECT_FALSE(cache.contains(handle_of(0xFF)));
  EXPECT_FALSE(cache.open(handle_of(0xFF)));
  EXPECT_EQ(log.opens, 2);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(IpcBufferCache, CloseUnmapsOneBufferAndReportsUnknownHandles) {
  OpenerLog log;
  IpcBufferCache cache(std::make_unique<FakeOpener>(log));
  const auto address = cache.open(handle_of(2));
  ASSERT_TRUE(address && cache.open(handle_of(3)));
  ASSERT_TRUE(cache.close(handle_of(2)));
  EXPECT_EQ(log.closed, std::vector<std::uintptr_t>{*address});
  const auto unknown = cache.close(handle_of(2));
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, Errc::kNotFound);
  ASSERT_TRUE(cache.open(handle_of(2)));  // reopened after a close
  EXPECT_EQ(log.opens, 3);
}

TEST(IpcBufferCache, ClearAndDestructionCloseEverythingStillOpen) {
  OpenerLog log;
  {
    IpcBufferCache cache(std::make_unique<FakeOpener>(log));
    ASSERT_TRUE(cache.open(handle_of(1)) && cache.open(handle_of(2)));
    cache.clear();
    EXPECT_EQ(log.closed.size(), 2u);
    EXPECT_EQ(cache.size(), 0u);
    ASSERT_TRUE(cache.open(handle_of(4)));
  }
  EXPECT_EQ(log.closed.size(), 3u);
}

}  // namespace
}  // namespace kvtier::kernels::cuda
