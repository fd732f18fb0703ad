#include "kvtier/shm/control_segment.hpp"

#include <gtest/gtest.h>

#include <array>

#include "shm_test_support.hpp"

namespace kvtier::shm {
namespace {

constexpr std::uint64_t kEpoch = 11;

struct ControlSegmentTest : ::testing::Test {
  void SetUp() override {
    auto made = ControlLayout::make(8, 4);
    ASSERT_TRUE(made) << made.error().message;
    layout.emplace(*made);
    auto created = create_control_segment(testing::unique_name(), *layout, kEpoch, 3);
    ASSERT_TRUE(created) << created.error().message;
    segment.emplace(std::move(*created));
  }
  ControlBlock& shared_block() {
    return *reinterpret_cast<ControlBlock*>(segment->base() + sizeof(SegmentHeader));
  }
  Result<ClientRings> client() {
    auto mapping = Mapping::map_segment(segment->fd(), SegmentKind::kControl, kEpoch);
    if (!mapping) return tl::unexpected(mapping.error());
    mapping_.emplace(std::move(*mapping));
    return client_rings(*mapping_);
  }

  std::optional<ControlLayout> layout;
  std::optional<Segment> segment;
  std::optional<Mapping> mapping_;
};

TEST(ControlLayout, PlacesRingsAfterHeaderAndBlock) {
  auto layout = ControlLayout::make(1024, 16);
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->block().score_ring_offset, 128u);
  EXPECT_EQ(layout->block().plan_ring_offset, 128u + score_ring_bytes(1024));
  EXPECT_EQ(layout->bytes(), 128u + score_ring_bytes(1024) + plan_ring_bytes(16));
  EXPECT_EQ(layout->block().plan_ring_offset % kCacheLine, 0u);
}

TEST(ControlLayout, RefusesCapacityThatIsNotAPowerOfTwo) {
  auto layout = ControlLayout::make(1000, 16);
  ASSERT_FALSE(layout);
  EXPECT_EQ(layout.error().code, Errc::kInvalidArgument);
  EXPECT_FALSE(ControlLayout::make(16, 0));
  EXPECT_FALSE(ControlLayout::make(kMaxRingCapacity * 2, 16));
}

TEST(ControlLayout, RefusesRingsBeyondTheSegment) {
  auto layout = ControlLayout::make(8, 4);
  ASSERT_TRUE(layout);
  auto rebuilt = ControlLayout::from_block(layout->block(), layout->bytes() - 1);
  ASSERT_FALSE(rebuilt);
  EXPECT_EQ(rebuilt.error().code, Errc::kProtocol);
  EXPECT_NE(rebuilt.error().message.find("beyond the segment"), std::string::npos);
}

TEST_F(ControlSegmentTest, ClientAndDaemonViewsShareBothRings) {
  auto rings = client();
  ASSERT_TRUE(rings) << rings.error().message;
  DaemonRings daemon = daemon_rings(*segment, *layout);

  ScoreRecord score{};
  score.step = 5;
  score.count = 1;
  ASSERT_EQ(rings->scores.push(score), PushResult::kPushed);
  std::array<ScoreRecord, 2> scores{};
  auto popped = daemon.scores.pop(scores);
  ASSERT_TRUE(popped) << popped.error().message;
  ASSERT_EQ(*popped, 1u);
  EXPECT_EQ(scores[0].step, 5u);

  PlanRecord plan{};
  plan.epoch = 1;
  plan.flags = kPlanLast;
  ASSERT_TRUE(daemon.plans.push(plan));
  std::array<PlanRecord, 2> plans{};
  auto got = rings->plans.pop(plans);
  ASSERT_TRUE(got) << got.error().message;
  ASSERT_EQ(*got, 1u);
  rings->plans.ack(plans[0].epoch);
  std::array<PlanAck, 2> acks{};
  ASSERT_EQ(daemon.plans.pop_acks(acks).value(), 1u);
  EXPECT_EQ(acks[0].epoch, 1u);
  EXPECT_EQ(acks[0].outcome, static_cast<std::uint32_t>(PlanOutcome::kApplied));
}

TEST_F(ControlSegmentTest, ClientRefusesAControlBlockWithAMovedRing) {
  shared_block().score_ring_offset += 64;
  auto rings = client();
  ASSERT_FALSE(rings);
  EXPECT_EQ(rings.error().code, Errc::kProtocol);
  EXPECT_EQ(rings.error().message, "control block score_ring_offset 192, expected 128");
}

TEST_F(ControlSegmentTest, ClientRefusesAControlBlockWithABadCapacity) {
  shared_block().plan_capacity = 3;
  auto rings = client();
  ASSERT_FALSE(rings);
  EXPECT_NE(rings.error().message.find("plan_capacity 3"), std::string::npos);
}

TEST_F(ControlSegmentTest, ClientRefusesCapacitiesThatOverrunTheSegment) {
  // Self-consistent block whose rings would end far past the mapping.
  auto big = ControlLayout::make(1u << 16, 4);
  ASSERT_TRUE(big);
  shared_block() = big->block();
  auto rings = client();
  ASSERT_FALSE(rings);
  EXPECT_NE(rings.error().message.find("beyond the segment"), std::string::npos);
}

TEST_F(ControlSegmentTest, AdoptingDaemonRebuildsTheSameLayout) {
  auto adopted = read_control_layout(segment->bytes());
  ASSERT_TRUE(adopted) << adopted.error().message;
  EXPECT_EQ(adopted->bytes(), layout->bytes());
  EXPECT_EQ(adopted->score_capacity(), 8u);
  EXPECT_EQ(adopted->plan_capacity(), 4u);
}

}  // namespace
}  // namespace kvtier::shm
