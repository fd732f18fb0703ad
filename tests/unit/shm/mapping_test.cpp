#include "kvtier/shm/mapping.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include "kvtier/shm/segment.hpp"
#include "shm_test_support.hpp"

namespace kvtier::shm {
namespace {

class MappingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto created = Segment::create(testing::unique_name(), SegmentKind::kControl, 8192, kEpoch, 5);
    ASSERT_TRUE(created) << created.error().message;
    segment_.emplace(std::move(*created));
  }
  SegmentHeader& header() { return *reinterpret_cast<SegmentHeader*>(segment_->base()); }
  Result<Mapping> map(SegmentKind kind = SegmentKind::kControl, std::uint64_t epoch = kEpoch) {
    return Mapping::map_segment(segment_->fd(), kind, epoch);
  }
  // Expects refusal with `code` and a message containing `text`.
  void expect_refused(Errc code, const std::string& text,
                      SegmentKind kind = SegmentKind::kControl, std::uint64_t epoch = kEpoch) {
    auto mapping = map(kind, epoch);
    ASSERT_FALSE(mapping);
    EXPECT_EQ(mapping.error().code, code) << mapping.error().message;
    EXPECT_NE(mapping.error().message.find(text), std::string::npos) << mapping.error().message;
  }

  static constexpr std::uint64_t kEpoch = 77;
  std::optional<Segment> segment_;
};

TEST_F(MappingTest, MapsAValidSegmentAndSeesTheDaemonsBytes) {
  segment_->payload()[100] = std::byte{0x42};
  auto mapping = map();
  ASSERT_TRUE(mapping) << mapping.error().message;
  EXPECT_EQ(mapping->size(), segment_->size());
  EXPECT_EQ(mapping->header().client_id, 5u);
  EXPECT_EQ(mapping->bytes()[sizeof(SegmentHeader) + 100], std::byte{0x42});
  mapping->bytes()[sizeof(SegmentHeader) + 101] = std::byte{0x43};  // shared, both ways
  EXPECT_EQ(segment_->payload()[101], std::byte{0x43});
}

TEST_F(MappingTest, AcceptsAnyEpochWhenAskedForZero) { EXPECT_TRUE(map(SegmentKind::kControl, 0)); }

TEST_F(MappingTest, RefusesWrongMagic) {
  header().magic ^= 1;
  expect_refused(Errc::kProtocol, "is not a kvtier segment");
}

TEST_F(MappingTest, RefusesOtherLayoutVersion) {
  header().layout_version = kLayoutVersion + 1;
  expect_refused(Errc::kVersionMismatch, "segment layout version " + std::to_string(kLayoutVersion + 1) +
                                             ", this build has layout version " + std::to_string(kLayoutVersion));
}

TEST_F(MappingTest, RefusesOtherFingerprint) {
  header().layout_fingerprint ^= 0xff;
  expect_refused(Errc::kVersionMismatch, "layout fingerprint");
}

TEST_F(MappingTest, RefusesOtherKind) {
  expect_refused(Errc::kProtocol, "segment kind 1 (control), expected 2 (pool)", SegmentKind::kPool);
}

TEST_F(MappingTest, RefusesOtherHeaderSize) {
  header().header_size = 128;
  expect_refused(Errc::kProtocol, "header size 128");
}

TEST_F(MappingTest, RefusesTruncatedObject) {
  const auto page = static_cast<off_t>(::sysconf(_SC_PAGESIZE));
  ASSERT_EQ(::ftruncate(segment_->fd(), static_cast<off_t>(segment_->size()) - page), 0);
  expect_refused(Errc::kProtocol, "truncated");
}

TEST_F(MappingTest, RefusesObjectSmallerThanAHeader) {
  ASSERT_EQ(::ftruncate(segment_->fd(), 10), 0);
  expect_refused(Errc::kProtocol, "smaller than its 64-byte header");
}

TEST_F(MappingTest, RefusesSegmentThatIsNotReady) {
  header().ready.store(0);
  expect_refused(Errc::kBadState, "not ready");
}

TEST_F(MappingTest, RefusesSegmentOfAnotherDaemonEpoch) {
  expect_refused(Errc::kBadState, "daemon epoch 77, expected 78", SegmentKind::kControl, kEpoch + 1);
}

TEST_F(MappingTest, RefusesABadFd) {
  auto mapping = Mapping::map_segment(-1, SegmentKind::kControl, 0);
  ASSERT_FALSE(mapping);
  EXPECT_EQ(mapping.error().code, Errc::kOsError);
}

}  // namespace
}  // namespace kvtier::shm
