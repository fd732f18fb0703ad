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

// The daemon's view of every acknowledgement published so far.
std::vector<PlanAck> pop_acks(PlanProducer& producer) {
  std::vector<PlanAck> out(kPlanAckSlots);
  auto popped = producer.pop_acks(out);
  EXPECT_TRUE(popped) << popped.error().message;
  out.resize(popped ? *popped : 0);
  return out;
}

TEST_F(PlanRing, AcksReachTheDaemonInTheOrderTheClientPublishedThem) {
  for (std::uint64_t e = 1; e <= 3; ++e) producer.push(make_plan(e, static_cast<std::uint32_t>(e), true));
  EXPECT_EQ(consumer.ack(3), AckResult::kPushed);
  EXPECT_EQ(consumer.fail(1), AckResult::kPushed);
  EXPECT_EQ(consumer.ack(2), AckResult::kPushed);
  const std::vector<PlanAck> acks = pop_acks(producer);
  ASSERT_EQ(acks.size(), 3u);
  EXPECT_EQ(acks[0].epoch, 3u);
  EXPECT_EQ(acks[0].outcome, static_cast<std::uint32_t>(PlanOutcome::kApplied));
  EXPECT_EQ(acks[1].epoch, 1u);
  EXPECT_EQ(acks[1].outcome, static_cast<std::uint32_t>(PlanOutcome::kFailed));
  EXPECT_EQ(acks[2].epoch, 2u);
  EXPECT_TRUE(pop_acks(producer).empty());
}

TEST_F(PlanRing, AckOfAnEpochNeverPublishedIsRefused) {
  producer.push(make_plan(1, 0, true));
  producer.push(make_plan(2, 1, false));  // epoch 2 not complete yet
  consumer.ack(2);
  std::array<PlanAck, 4> out{};
  auto popped = producer.pop_acks(out);
  ASSERT_FALSE(popped);
  EXPECT_EQ(popped.error().code, Errc::kProtocol);
  EXPECT_EQ(popped.error().message, "plan ack 0 names epoch 2, never published (last published 1)");
}

TEST_F(PlanRing, AckOfEpochZeroIsRefused) {
  producer.push(make_plan(1, 0, true));
  consumer.fail(0);
  std::array<PlanAck, 4> out{};
  auto popped = producer.pop_acks(out);
  ASSERT_FALSE(popped);
  EXPECT_EQ(popped.error().message, "plan ack 0 names epoch 0, never published (last published 1)");
}

TEST_F(PlanRing, AckWithAnUnknownOutcomeIsRefused) {
  producer.push(make_plan(1, 0, true));
  consumer.ack(1);
  ring.header().acks[0].outcome = 7;
  std::array<PlanAck, 4> out{};
  auto popped = producer.pop_acks(out);
  ASSERT_FALSE(popped);
  EXPECT_EQ(popped.error().message, "plan ack 0 has outcome 7 (1 applied, 2 failed)");
}

TEST_F(PlanRing, AckCounterGoingBackwardsIsRefused) {
  for (std::uint64_t e = 1; e <= 3; ++e) producer.push(make_plan(e, 0, true));
  consumer.ack(1);
  consumer.ack(2);
  ASSERT_EQ(pop_acks(producer).size(), 2u);
  ring.header().consumer.ack_write.store(1);
  std::array<PlanAck, 4> out{};
  auto popped = producer.pop_acks(out);
  ASSERT_FALSE(popped);
  EXPECT_EQ(popped.error().code, Errc::kProtocol);
  EXPECT_EQ(popped.error().message, "plan ack ring write counter jumped backwards from 2 to 1");
}

TEST_F(PlanRing, AckCounterBeyondTheSlotsIsRefused) {
  producer.push(make_plan(1, 0, true));
  ring.header().consumer.ack_write.store(kPlanAckSlots + 1);
  std::array<PlanAck, 4> out{};
  auto popped = producer.pop_acks(out);
  ASSERT_FALSE(popped);
  EXPECT_EQ(popped.error().message, "plan ack ring write counter 65 is beyond capacity: read 0, capacity 64");
}

TEST_F(PlanRing, AcksBeyondTheFreeSlotsAreRefusedUntilTheDaemonReadsThem) {
  producer.push(make_plan(1, 0, true));
  for (std::uint32_t i = 0; i < kPlanAckSlots; ++i) ASSERT_EQ(consumer.ack(1), AckResult::kPushed);
  EXPECT_EQ(consumer.ack(1), AckResult::kFull);
  std::array<PlanAck, 1> one{};
  ASSERT_TRUE(producer.pop_acks(one));
  EXPECT_EQ(consumer.ack(1), AckResult::kPushed);
}

TEST_F(PlanRing, AckAfterDaemonAnnouncedSleepAsksForOneDoorbell) {
  producer.push(make_plan(1, 0, true));
  producer.push(make_plan(2, 1, true));
  ASSERT_TRUE(producer.announce_sleep());
  EXPECT_EQ(consumer.ack(1), AckResult::kPushedWake);
  EXPECT_EQ(consumer.ack(2), AckResult::kPushed);
}

TEST_F(PlanRing, DaemonDoesNotSleepOverAnUnreadAck) {
  producer.push(make_plan(1, 0, true));
  consumer.ack(1);
  EXPECT_FALSE(producer.announce_sleep());
  ASSERT_EQ(pop_acks(producer).size(), 1u);
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
