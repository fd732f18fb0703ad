#include "kvtier/shm/plan_ring.hpp"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <vector>

#include "shm_test_support.hpp"

namespace kvtier::shm {
namespace {

using namespace std::chrono_literals;
using testing::RingBuffer;

PlanRecord make_plan(std::uint64_t epoch, std::uint32_t sequence, bool last) {
  PlanRecord record{};
  record.epoch = epoch;
  record.sequence = sequence;
  record.move_count = 1;
  record.flags = last ? kPlanLast : 0;
  record.moves[0] = PlanMove{sequence * 2, kTierHbm, kTierDdr, 0, kNoSlot, sequence};
  return record;
}

struct PlanRingFixture : ::testing::Test {
  static constexpr std::uint32_t kCapacity = 4;
  RingBuffer<PlanRingHeader> ring{plan_ring_bytes(kCapacity)};
  PlanProducer producer{ring.span(), kCapacity};
  PlanConsumer consumer{ring.span(), kCapacity};
};

using PlanRing = PlanRingFixture;

TEST_F(PlanRing, PushReturnsFalseWhenFull) {
  for (std::uint32_t i = 0; i < kCapacity; ++i) EXPECT_TRUE(producer.push(make_plan(i + 1, i, true)));
  EXPECT_FALSE(producer.push(make_plan(kCapacity + 1, 9, true)));
  EXPECT_EQ(producer.free_slots(), 0u);
}

TEST_F(PlanRing, KeepsFifoOrderAcrossWrapAndPlansSpanningRecords) {
  std::uint64_t epoch = 1;
  std::uint32_t sequence = 0;
  std::vector<std::uint32_t> seen;
  std::array<PlanRecord, 4> out{};
  for (int round = 0; round < 8; ++round, ++epoch) {
    ASSERT_TRUE(producer.push(make_plan(epoch, sequence++, false)));
    ASSERT_TRUE(producer.push(make_plan(epoch, sequence++, false)));
    ASSERT_TRUE(producer.push(make_plan(epoch, sequence++, true)));
    EXPECT_EQ(producer.published_epoch(), epoch);
    auto popped = consumer.pop(out);
    ASSERT_TRUE(popped) << popped.error().message;
    ASSERT_EQ(*popped, 3u);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(out[i].epoch, epoch);
      EXPECT_EQ(out[i].moves[0].dst_slot, out[i].sequence);
      seen.push_back(out[i].sequence);
    }
    EXPECT_EQ(out[2].flags, kPlanLast);
  }
  for (std::uint32_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i);
}

TEST_F(PlanRing, BackpressureNoticesAddUpAndKeepTheLatestReason) {
  EXPECT_EQ(consumer.backpressure().tokens, 0u);
  EXPECT_EQ(consumer.backpressure().reason, 0u);
  producer.note_backpressure(5, BackpressureReason::kPoolFull);
  producer.note_backpressure(7, BackpressureReason::kNodeBudget);
  EXPECT_EQ(consumer.backpressure().tokens, 12u);
  EXPECT_EQ(consumer.backpressure().reason, static_cast<std::uint32_t>(BackpressureReason::kNodeBudget));
}

TEST_F(PlanRing, AckIsVisibleToTheDaemon) {
  producer.push(make_plan(1, 0, true));
  producer.push(make_plan(2, 1, true));
  consumer.ack(2);
  auto acked = producer.acked_epoch();
  ASSERT_TRUE(acked) << acked.error().message;
  EXPECT_EQ(*acked, 2u);
}

TEST_F(PlanRing, AckBeyondLastPublishedEpochIsRefused) {
  producer.push(make_plan(1, 0, true));
  producer.push(make_plan(2, 1, false));  // epoch 2 not complete yet
  ring.header().consumer.acked_epoch.store(2);
  auto acked = producer.acked_epoch();
  ASSERT_FALSE(acked);
  EXPECT_EQ(acked.error().code, Errc::kProtocol);
  EXPECT_EQ(acked.error().message, "plan ring acked epoch 2 is beyond the last published epoch 1");
}

TEST_F(PlanRing, AckGoingBackwardsIsRefused) {
  for (std::uint64_t e = 1; e <= 3; ++e) producer.push(make_plan(e, 0, true));
  consumer.ack(3);
  ASSERT_TRUE(producer.acked_epoch());
  ring.header().consumer.acked_epoch.store(1);
  auto acked = producer.acked_epoch();
  ASSERT_FALSE(acked);
  EXPECT_EQ(acked.error().code, Errc::kProtocol);
  EXPECT_EQ(acked.error().message, "plan ring acked epoch went backwards from 3 to 1");
}

TEST_F(PlanRing, FailedEpochIsValidatedLikeAcks) {
  producer.push(make_plan(1, 0, true));
  consumer.fail(1);
  auto failed = producer.failed_epoch();
  ASSERT_TRUE(failed);
  EXPECT_EQ(*failed, 1u);
  ring.header().consumer.failed_epoch.store(5);
  failed = producer.failed_epoch();
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message, "plan ring failed epoch 5 is beyond the last published epoch 1");
  ring.header().consumer.failed_epoch.store(0);
  failed = producer.failed_epoch();
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message, "plan ring failed epoch went backwards from 1 to 0");
}

TEST_F(PlanRing, AckAfterDaemonAnnouncedSleepAsksForOneDoorbell) {
  producer.push(make_plan(1, 0, true));
  producer.push(make_plan(2, 1, true));
  ASSERT_TRUE(producer.announce_sleep());
  EXPECT_TRUE(consumer.ack(1));
  EXPECT_FALSE(consumer.ack(2));
}

TEST_F(PlanRing, DaemonDoesNotSleepOverAnUnseenAck) {
  producer.push(make_plan(1, 0, true));
  consumer.ack(1);
  EXPECT_FALSE(producer.announce_sleep());
  ASSERT_TRUE(producer.acked_epoch());
  EXPECT_TRUE(producer.announce_sleep());
}

TEST_F(PlanRing, WaitTimesOutWhenEmpty) { EXPECT_FALSE(consumer.wait(20ms)); }

TEST_F(PlanRing, WaitReturnsAtOnceWhenARecordIsPending) {
  producer.push(make_plan(1, 0, true));
  EXPECT_TRUE(consumer.wait(0ns));
}

TEST_F(PlanRing, ConsumerRefusesWriteCounterThatJumpsBackwards) {
  producer.push(make_plan(1, 0, true));
  producer.push(make_plan(2, 1, true));
  std::array<PlanRecord, 1> out{};
  ASSERT_TRUE(consumer.pop(out));
  ring.header().producer.write.store(0);
  auto popped = consumer.pop(out);
  ASSERT_FALSE(popped);
  EXPECT_EQ(popped.error().code, Errc::kProtocol);
  EXPECT_EQ(popped.error().message, "plan ring write counter jumped backwards from 2 to 0");
}

TEST_F(PlanRing, ConsumerRefusesRecordWithTooManyMoves) {
  PlanRecord record = make_plan(1, 0, true);
  producer.push(record);
  // Corrupt the slot in place: header (128 B) then slot 0.
  auto* slot = reinterpret_cast<PlanRecord*>(ring.span().data() + sizeof(PlanRingHeader));
  slot->move_count = kMovesPerRecord + 1;
  std::array<PlanRecord, 1> out{};
  auto popped = consumer.pop(out);
  ASSERT_FALSE(popped);
  EXPECT_EQ(popped.error().code, Errc::kProtocol);
}

TEST_F(PlanRing, AdoptingProducerContinuesAfterTheNewestEpoch) {
  producer.push(make_plan(4, 0, true));
  producer.push(make_plan(5, 1, false));  // the old daemon died mid-epoch
  PlanProducer adopted(ring.span(), kCapacity);
  EXPECT_EQ(adopted.published_epoch(), 5u);
  EXPECT_TRUE(adopted.push(make_plan(6, 2, true)));
}

}  // namespace
}  // namespace kvtier::shm
