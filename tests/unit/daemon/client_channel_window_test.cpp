// ClientChannel with several plans in flight (limits.plans_in_flight, plan_outbox.hpp): plans
// of different sequences overlap and resolve on their own, a sequence's plans stay in order, bad
// acks end the session. Fixture: client_channel_fixture.hpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "client_channel_fixture.hpp"

namespace kvtier::daemon::testing {
namespace {

TEST_F(ClientChannelTest, PlansOfTwoSequencesAreInFlightTogetherAndCommitWhenAckedOutOfOrder) {
  start();
  decide_once(1);
  decide_once(2);
  const std::vector<shm::PlanRecord> records = plan_records();
  ASSERT_EQ(records.size(), 2u);  // the second went out with the first unacknowledged
  EXPECT_EQ(records[0].epoch, 1u);
  EXPECT_EQ(records[0].sequence, 1u);
  EXPECT_EQ(records[1].epoch, 2u);
  EXPECT_EQ(records[1].sequence, 2u);
  EXPECT_EQ(channel_->plans_in_flight(), 2u);
  EXPECT_EQ(channel_->snapshot().pool_slots_used, 8u);

  ack(2);
  ClientSnapshot s = channel_->snapshot();
  EXPECT_EQ(sequence(s, 2)->tokens_t1, 4u);
  EXPECT_EQ(sequence(s, 1)->tokens_t1, 0u);  // its plan is still in flight
  ack(1);
  s = channel_->snapshot();
  EXPECT_EQ(s.plans_acked, 2u);
  EXPECT_EQ(sequence(s, 1)->tokens_t1, 4u);
  EXPECT_EQ(sequence(s, 2)->tokens_t1, 4u);
  EXPECT_EQ(s.pool_slots_used, 8u);
  EXPECT_EQ(channel_->plans_in_flight(), 0u);
  EXPECT_TRUE(errors_.empty());
}

TEST_F(ClientChannelTest, OnePlanFailingWhileAnotherCommitsRollsBackOnlyItsOwnSequence) {
  start();
  decide_once(1);
  decide_once(2);
  ASSERT_EQ(plan_records().size(), 2u);
  (void)plans_->fail(1);
  ack(2);  // both resolved in one pass
  const ClientSnapshot s = channel_->snapshot();
  EXPECT_EQ(s.plans_failed, 1u);
  EXPECT_EQ(s.plans_acked, 1u);
  EXPECT_EQ(sequence(s, 1)->tokens_t0, 8u);
  EXPECT_EQ(sequence(s, 1)->tokens_t1, 0u);
  EXPECT_EQ(sequence(s, 2)->tokens_t0, 4u);
  EXPECT_EQ(sequence(s, 2)->tokens_t1, 4u);
  EXPECT_EQ(s.pool_slots_used, 4u);  // sequence 1's destinations went back
  EXPECT_TRUE(errors_.empty());
}

TEST_F(ClientChannelTest, ASequenceDueWhileItsOwnPlanIsInFlightWaitsWhileOthersGoOut) {
  start();
  decide_once(1);
  push_scores(1, 8, ascending(4, 0.5f));
  end_step(1);  // due again: owed until epoch 1 resolves
  decide_once(2);
  std::vector<shm::PlanRecord> records = plan_records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].sequence, 1u);
  EXPECT_EQ(records[1].sequence, 2u);
  ack(1);
  records = plan_records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].epoch, 3u);
  EXPECT_EQ(records[0].sequence, 1u);
  EXPECT_TRUE(errors_.empty());
}

TEST_F(ClientChannelTest, AWindowOfOneSerializesTheSequences) {
  config_.limits.plans_in_flight = 1;
  start();
  decide_once(1);
  decide_once(2);
  std::vector<shm::PlanRecord> records = plan_records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].sequence, 1u);
  ack(1);
  records = plan_records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].epoch, 2u);
  EXPECT_EQ(records[0].sequence, 2u);
}

TEST_F(ClientChannelTest, AnAckOfAPlanNeverPublishedEndsTheSession) {
  start();
  decide_once(1);
  ASSERT_EQ(plan_records().size(), 1u);
  ack(2);
  ASSERT_EQ(errors_.size(), 1u);
  EXPECT_EQ(errors_[0].code, Errc::kProtocol);
  EXPECT_EQ(errors_[0].message, "plan ack 0 names epoch 2, never published (last published 1)");
}

TEST_F(ClientChannelTest, ASecondAckOfOnePlanEndsTheSession) {
  start();
  decide_once(1);
  decide_once(2);
  ASSERT_EQ(plan_records().size(), 2u);
  ack(1);
  ack(1);
  ASSERT_EQ(errors_.size(), 1u);
  EXPECT_EQ(errors_[0].code, Errc::kProtocol);
  EXPECT_EQ(errors_[0].message, "plan ack of epoch 1: that plan is already resolved (acknowledged twice)");
}

}  // namespace
}  // namespace kvtier::daemon::testing
