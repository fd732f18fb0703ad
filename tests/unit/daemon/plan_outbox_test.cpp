// PlanOutbox (daemon/src/plan_outbox.hpp) over a plan ring on the heap: the outbox's
// PlanProducer and a PlanConsumer (the client) over the same bytes. Plans carry real
// PlanTransactions over a T1 slot allocator the test owns, one slot map per sequence.
#include "plan_outbox.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "heap_ring.hpp"
#include "kvtier/shm/plan_ring.hpp"
#include "kvtier/tier/plan_transaction.hpp"
#include "kvtier/tier/slot_allocator.hpp"
#include "kvtier/tier/slot_map.hpp"

namespace kvtier::daemon {
namespace {

constexpr std::uint32_t kCapacity = 4;
constexpr std::uint32_t kWindow = 3;
constexpr std::uint32_t kSequence = 7;

class PlanOutboxTest : public ::testing::Test {
 protected:
  // A transaction moving positions [0, n) of `sequence` from T0 to T1.
  tier::PlanTransaction demote(std::uint32_t n, std::uint32_t sequence = kSequence) {
    std::vector<tier::TierMove> moves;
    for (std::uint32_t p = 0; p < n; ++p) moves.push_back({p, tier::Tier::kT0, tier::Tier::kT1});
    auto transaction = tier::PlanTransaction::prepare(moves, slots_[sequence], allocator_);
    EXPECT_TRUE(transaction) << transaction.error().message;
    return std::move(*transaction);
  }
  // What the client pops: every record published so far.
  std::vector<shm::PlanRecord> pop() {
    std::vector<shm::PlanRecord> out(kCapacity);
    auto popped = client_.pop(out);
    EXPECT_TRUE(popped) << popped.error().message;
    out.resize(popped ? *popped : 0);
    return out;
  }
  std::vector<PlanOutbox::Resolved> poll() {
    auto resolved = outbox_.poll();
    EXPECT_TRUE(resolved) << resolved.error().message;
    return resolved ? std::move(*resolved) : std::vector<PlanOutbox::Resolved>{};
  }
  Error poll_error() {
    auto resolved = outbox_.poll();
    EXPECT_FALSE(resolved);
    return resolved ? Error{} : resolved.error();
  }

  std::map<std::uint32_t, tier::SlotMap> slots_;
  tier::SlotAllocator allocator_{512};
  testing::HeapRing<shm::PlanRingHeader> ring_{shm::plan_ring_bytes(kCapacity)};
  PlanOutbox outbox_{shm::PlanProducer(ring_.span(), kCapacity), kWindow};
  shm::PlanConsumer client_{ring_.span(), kCapacity};
};

TEST_F(PlanOutboxTest, APlanIsOneRecordOfItsMovesMarkedLast) {
  ASSERT_TRUE(outbox_.send(kSequence, PlanKind::kDecision, demote(3)));
  const std::vector<shm::PlanRecord> records = pop();
  ASSERT_EQ(records.size(), 1u);
  const shm::PlanRecord& r = records[0];
  EXPECT_EQ(r.epoch, 1u);
  EXPECT_EQ(r.sequence, kSequence);
  EXPECT_EQ(r.flags, shm::kPlanLast);
  ASSERT_EQ(r.move_count, 3u);
  const PlanOutbox::Plan* plan = outbox_.in_flight(kSequence);
  ASSERT_NE(plan, nullptr);
  for (std::uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r.moves[i].position, i);
    EXPECT_EQ(r.moves[i].from_tier, shm::kTierHbm);
    EXPECT_EQ(r.moves[i].to_tier, shm::kTierDdr);
    EXPECT_EQ(r.moves[i].src_slot, shm::kNoSlot);
    EXPECT_EQ(r.moves[i].dst_slot, plan->transaction->planned()[i].destination_slot);
  }
  EXPECT_EQ(plan->epoch, 1u);
  EXPECT_EQ(plan->sequence, kSequence);
  EXPECT_EQ(plan->kind, PlanKind::kDecision);
  EXPECT_EQ(outbox_.next_epoch(), 2u);
  EXPECT_EQ(outbox_.plans_sent(), 1u);
  EXPECT_EQ(outbox_.moves_sent(), 3u);
}

TEST_F(PlanOutboxTest, ALargePlanIsChunkedByMovesPerRecordWithLastOnTheFinalRecord) {
  const std::uint32_t n = 2 * shm::kMovesPerRecord + 1;
  ASSERT_TRUE(outbox_.send(kSequence, PlanKind::kDecision, demote(n)));
  const std::vector<shm::PlanRecord> records = pop();
  ASSERT_EQ(records.size(), 3u);
  const std::array<std::uint32_t, 3> counts{shm::kMovesPerRecord, shm::kMovesPerRecord, 1};
  std::uint32_t position = 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].epoch, 1u);
    EXPECT_EQ(records[i].flags, i + 1 == records.size() ? shm::kPlanLast : 0);
    ASSERT_EQ(records[i].move_count, counts[i]);
    for (std::uint32_t m = 0; m < records[i].move_count; ++m) EXPECT_EQ(records[i].moves[m].position, position++);
  }
  EXPECT_EQ(outbox_.moves_sent(), n);
}

TEST_F(PlanOutboxTest, WithoutRoomForTheWholePlanNothingIsPublishedAndTheEpochIsKept) {
  tier::PlanTransaction big = demote(kCapacity * shm::kMovesPerRecord + 1);  // one record too many
  EXPECT_FALSE(outbox_.send(kSequence, PlanKind::kDecision, std::move(big)));
  EXPECT_TRUE(big.open());  // still the caller's
  EXPECT_TRUE(outbox_.in_flight().empty());
  EXPECT_EQ(outbox_.next_epoch(), 1u);
  EXPECT_EQ(outbox_.plans_sent(), 0u);
  EXPECT_TRUE(pop().empty());
  ASSERT_TRUE(big.rollback());

  ASSERT_TRUE(outbox_.send(kSequence, PlanKind::kDecision, demote(1)));
  const std::vector<shm::PlanRecord> records = pop();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].epoch, 1u);
}

TEST_F(PlanOutboxTest, AnAckResolvesThePlanApplied) {
  ASSERT_TRUE(outbox_.send(kSequence, PlanKind::kRelief, demote(2)));
  (void)pop();
  EXPECT_TRUE(poll().empty());  // not acknowledged yet
  (void)client_.ack(1);
  std::vector<PlanOutbox::Resolved> resolved = poll();
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_TRUE(resolved[0].applied);
  EXPECT_EQ(resolved[0].plan.epoch, 1u);
  EXPECT_EQ(resolved[0].plan.kind, PlanKind::kRelief);
  ASSERT_TRUE(resolved[0].plan.transaction);
  EXPECT_EQ(resolved[0].plan.transaction->planned().size(), 2u);
  EXPECT_TRUE(outbox_.in_flight().empty());
  EXPECT_EQ(outbox_.plans_acked(), 1u);
  EXPECT_EQ(outbox_.plans_failed(), 0u);
  ASSERT_TRUE(resolved[0].plan.transaction->commit(slots_[kSequence]));
}

TEST_F(PlanOutboxTest, AFailedAckResolvesThePlanNotApplied) {
  ASSERT_TRUE(outbox_.send(kSequence, PlanKind::kDecision, demote(2)));
  (void)pop();
  (void)client_.fail(1);
  std::vector<PlanOutbox::Resolved> resolved = poll();
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_FALSE(resolved[0].applied);
  EXPECT_EQ(resolved[0].plan.sequence, kSequence);
  EXPECT_EQ(outbox_.plans_failed(), 1u);
  EXPECT_EQ(outbox_.plans_acked(), 0u);
}

TEST_F(PlanOutboxTest, AnAckBeyondThePublishedEpochIsAProtocolError) {
  ASSERT_TRUE(outbox_.send(kSequence, PlanKind::kDecision, demote(1)));
  (void)pop();
  (void)client_.ack(2);
  const Error error = poll_error();
  EXPECT_EQ(error.code, Errc::kProtocol);
  EXPECT_EQ(error.message, "plan ack 0 names epoch 2, never published (last published 1)");
  EXPECT_NE(outbox_.in_flight(kSequence), nullptr);
}

TEST_F(PlanOutboxTest, AcksAreValidatedEvenWithNothingInFlight) {
  (void)client_.fail(1);  // nothing was ever published
  EXPECT_EQ(poll_error().code, Errc::kProtocol);
}

TEST_F(PlanOutboxTest, AnAckResolvesItsPlanOnce) {
  ASSERT_TRUE(outbox_.send(kSequence, PlanKind::kDecision, demote(1)));
  (void)pop();
  (void)client_.ack(1);
  ASSERT_EQ(poll().size(), 1u);
  EXPECT_TRUE(poll().empty());
  EXPECT_EQ(outbox_.plans_acked(), 1u);
}

TEST_F(PlanOutboxTest, ASecondAckOfAResolvedPlanIsAProtocolError) {
  ASSERT_TRUE(outbox_.send(kSequence, PlanKind::kDecision, demote(1)));
  (void)pop();
  (void)client_.ack(1);
  ASSERT_EQ(poll().size(), 1u);
  (void)client_.fail(1);
  const Error error = poll_error();
  EXPECT_EQ(error.code, Errc::kProtocol);
  EXPECT_EQ(error.message, "plan ack of epoch 1: that plan is already resolved (acknowledged twice)");
}

TEST_F(PlanOutboxTest, TwoAcksOfOnePlanInOneBatchAreAProtocolError) {
  ASSERT_TRUE(outbox_.send(kSequence, PlanKind::kDecision, demote(1)));
  (void)pop();
  (void)client_.ack(1);
  (void)client_.ack(1);
  EXPECT_EQ(poll_error().code, Errc::kProtocol);
}

TEST_F(PlanOutboxTest, PlansOfDifferentSequencesAreInFlightTogether) {
  for (std::uint32_t sequence = 1; sequence <= kWindow; ++sequence) {
    ASSERT_TRUE(outbox_.can_send(sequence));
    ASSERT_TRUE(outbox_.send(sequence, PlanKind::kDecision, demote(2, sequence)));
  }
  const std::vector<shm::PlanRecord> records = pop();
  ASSERT_EQ(records.size(), kWindow);
  for (std::uint32_t i = 0; i < kWindow; ++i) {
    EXPECT_EQ(records[i].epoch, i + 1);
    EXPECT_EQ(records[i].sequence, i + 1);
    ASSERT_NE(outbox_.in_flight(i + 1), nullptr);
    EXPECT_EQ(outbox_.in_flight(i + 1)->epoch, i + 1);
  }
  EXPECT_EQ(outbox_.in_flight().size(), kWindow);
  EXPECT_EQ(allocator_.used(), 2 * kWindow);  // every plan holds its own destinations
}

TEST_F(PlanOutboxTest, ASequenceHasOnePlanInFlightAtATime) {
  ASSERT_TRUE(outbox_.send(1, PlanKind::kDecision, demote(1, 1)));
  EXPECT_FALSE(outbox_.can_send(1));
  EXPECT_TRUE(outbox_.can_send(2));
  (void)pop();
  (void)client_.ack(1);
  ASSERT_EQ(poll().size(), 1u);
  EXPECT_TRUE(outbox_.can_send(1));
}

TEST_F(PlanOutboxTest, TheWindowBoundsThePlansInFlight) {
  for (std::uint32_t sequence = 1; sequence <= kWindow; ++sequence) {
    ASSERT_TRUE(outbox_.send(sequence, PlanKind::kDecision, demote(1, sequence)));
  }
  EXPECT_TRUE(outbox_.full());
  EXPECT_FALSE(outbox_.can_send(kWindow + 1));
  (void)pop();
  (void)client_.ack(2);
  ASSERT_EQ(poll().size(), 1u);
  EXPECT_TRUE(outbox_.can_send(kWindow + 1));
  EXPECT_FALSE(outbox_.can_send(1));  // still in flight
}

TEST_F(PlanOutboxTest, AcksOutOfOrderResolveEachTheirOwnPlan) {
  for (std::uint32_t sequence = 1; sequence <= 3; ++sequence) {
    ASSERT_TRUE(outbox_.send(sequence, PlanKind::kDecision, demote(1, sequence)));
  }
  (void)pop();
  (void)client_.ack(3);
  (void)client_.ack(1);
  std::vector<PlanOutbox::Resolved> resolved = poll();
  ASSERT_EQ(resolved.size(), 2u);
  EXPECT_EQ(resolved[0].plan.epoch, 3u);
  EXPECT_EQ(resolved[0].plan.sequence, 3u);
  EXPECT_EQ(resolved[1].plan.epoch, 1u);
  EXPECT_EQ(resolved[1].plan.sequence, 1u);
  ASSERT_EQ(outbox_.in_flight().size(), 1u);
  EXPECT_EQ(outbox_.in_flight(2)->epoch, 2u);
  (void)client_.ack(2);
  resolved = poll();
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].plan.sequence, 2u);
  EXPECT_EQ(outbox_.plans_acked(), 3u);
}

TEST_F(PlanOutboxTest, OnePlanFailingWhileAnotherCommitsRollsBackOnlyTheFailedOne) {
  ASSERT_TRUE(outbox_.send(1, PlanKind::kDecision, demote(2, 1)));
  ASSERT_TRUE(outbox_.send(2, PlanKind::kDecision, demote(3, 2)));
  (void)pop();
  (void)client_.ack(2);
  (void)client_.fail(1);
  std::vector<PlanOutbox::Resolved> resolved = poll();
  ASSERT_EQ(resolved.size(), 2u);
  ASSERT_TRUE(resolved[0].applied);
  ASSERT_EQ(resolved[0].plan.sequence, 2u);
  ASSERT_FALSE(resolved[1].applied);
  ASSERT_EQ(resolved[1].plan.sequence, 1u);
  ASSERT_TRUE(resolved[0].plan.transaction->commit(slots_[2]));
  ASSERT_TRUE(resolved[1].plan.transaction->rollback());
  EXPECT_EQ(allocator_.used(), 3u);  // sequence 2's rows only
  for (std::uint32_t p = 0; p < 3; ++p) EXPECT_NE(slots_[2].slot_of(p), tier::kNoSlot);
  for (std::uint32_t p = 0; p < 2; ++p) EXPECT_EQ(slots_[1].slot_of(p), tier::kNoSlot);
  EXPECT_EQ(outbox_.plans_acked(), 1u);
  EXPECT_EQ(outbox_.plans_failed(), 1u);
}

TEST_F(PlanOutboxTest, AHandOffPlanCarriesItsOriginAndNoTransaction) {
  const HandoffOrigin origin{42, 3, 9};
  const std::array<shm::PlanMove, 2> moves{shm::PlanMove{0, shm::kTierPeer, shm::kTierHbm, 0, 5, shm::kNoSlot},
                                           shm::PlanMove{1, shm::kTierPeer, shm::kTierDdr, 0, shm::kNoSlot, 2}};
  ASSERT_TRUE(outbox_.send_handoff(kSequence, origin, moves));
  const std::vector<shm::PlanRecord> records = pop();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].move_count, 2u);
  EXPECT_EQ(records[0].moves[0].src_slot, 5u);
  EXPECT_EQ(records[0].moves[1].to_tier, shm::kTierDdr);
  (void)client_.ack(1);
  std::vector<PlanOutbox::Resolved> resolved = poll();
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].plan.kind, PlanKind::kHandoff);
  EXPECT_FALSE(resolved[0].plan.transaction);
  EXPECT_EQ(resolved[0].plan.origin.token, 42u);
  EXPECT_EQ(resolved[0].plan.origin.exporter, 3u);
  EXPECT_EQ(resolved[0].plan.origin.sequence, 9u);
}

TEST_F(PlanOutboxTest, ATakenPlanIsNeitherAckedNorFailedAndItsEpochStaysUsed) {
  ASSERT_TRUE(outbox_.send(kSequence, PlanKind::kDecision, demote(1)));
  EXPECT_FALSE(outbox_.take(kSequence + 1));
  std::optional<PlanOutbox::Plan> taken = outbox_.take(kSequence);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->epoch, 1u);
  EXPECT_TRUE(outbox_.in_flight().empty());
  (void)pop();
  (void)client_.ack(1);  // the client acknowledges late: ignored
  EXPECT_TRUE(poll().empty());
  EXPECT_EQ(outbox_.plans_acked(), 0u);
  EXPECT_EQ(outbox_.plans_failed(), 0u);
  EXPECT_EQ(outbox_.next_epoch(), 2u);
  ASSERT_TRUE(taken->transaction->rollback());
}

TEST_F(PlanOutboxTest, ATakenPlanTakesOneLateAckOnly) {
  ASSERT_TRUE(outbox_.send(kSequence, PlanKind::kDecision, demote(1)));
  std::optional<PlanOutbox::Plan> taken = outbox_.take(kSequence);
  (void)pop();
  (void)client_.ack(1);
  (void)client_.ack(1);
  EXPECT_EQ(poll_error().code, Errc::kProtocol);
  ASSERT_TRUE(taken->transaction->rollback());
}

}  // namespace
}  // namespace kvtier::daemon
