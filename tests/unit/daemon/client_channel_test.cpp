// ClientChannel (daemon/src/client_channel.hpp): decisions, acks, failures, closes and relief,
// one plan at a time, and the doorbell. Fixture: client_channel_fixture.hpp.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include <asio/post.hpp>

#include "client_channel_fixture.hpp"

namespace kvtier::daemon::testing {
namespace {

TEST_F(ClientChannelTest, ADecisionGoesOutAsAPlanAndItsAckCommitsTheTiers) {
  start();
  decide_once();
  const std::vector<shm::PlanRecord> records = plan_records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].epoch, 1u);
  EXPECT_EQ(records[0].sequence, 1u);
  EXPECT_EQ(records[0].flags, shm::kPlanLast);
  ASSERT_EQ(records[0].move_count, 4u);
  for (std::uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(records[0].moves[i].position, i);
    EXPECT_EQ(records[0].moves[i].from_tier, shm::kTierHbm);
    EXPECT_EQ(records[0].moves[i].to_tier, shm::kTierDdr);
    EXPECT_LT(records[0].moves[i].dst_slot, kSlots);
  }
  ClientSnapshot before = channel_->snapshot();
  EXPECT_EQ(before.plans_sent, 1u);
  EXPECT_EQ(before.pool_slots_used, 4u);  // destinations are held while the plan is out
  EXPECT_EQ(sequence(before, 1)->tokens_t1, 0u);

  ack(1);
  const ClientSnapshot after = channel_->snapshot();
  EXPECT_EQ(after.plans_acked, 1u);
  EXPECT_EQ(after.plans_failed, 0u);
  EXPECT_EQ(after.moves_sent, 4u);
  EXPECT_EQ(after.score_records, 2u);
  EXPECT_EQ(after.pool_slots_used, 4u);
  EXPECT_EQ(after.ddr_bytes_used, 4 * row_bytes_);
  ASSERT_NE(sequence(after, 1), nullptr);
  EXPECT_EQ(sequence(after, 1)->tokens_t0, 4u);
  EXPECT_EQ(sequence(after, 1)->tokens_t1, 4u);
  EXPECT_TRUE(errors_.empty());
}

TEST_F(ClientChannelTest, AFailedPlanRollsBackTiersAndSlots) {
  start();
  decide_once();
  ASSERT_EQ(plan_records().size(), 1u);
  fail(1);
  const ClientSnapshot s = channel_->snapshot();
  EXPECT_EQ(s.plans_failed, 1u);
  EXPECT_EQ(s.plans_acked, 0u);
  EXPECT_EQ(s.pool_slots_used, 0u);
  EXPECT_EQ(sequence(s, 1)->tokens_t0, 8u);
  EXPECT_EQ(sequence(s, 1)->tokens_t1, 0u);
  EXPECT_TRUE(errors_.empty());
}

TEST_F(ClientChannelTest, ClosingASequenceWithItsPlanOutstandingRollsItBackAndFreesItsSlots) {
  start();
  decide_once();
  ASSERT_EQ(plan_records().size(), 1u);
  ASSERT_EQ(channel_->snapshot().pool_slots_used, 4u);
  channel_->close_sequence(1);
  ClientSnapshot s = channel_->snapshot();
  EXPECT_TRUE(s.sequences.empty());
  EXPECT_EQ(s.pool_slots_used, 0u);
  ack(1);  // a late ack of the closed sequence's plan is no error and resolves nothing
  s = channel_->snapshot();
  EXPECT_EQ(s.plans_acked, 0u);
  EXPECT_EQ(s.pool_slots_used, 0u);
  EXPECT_TRUE(errors_.empty());
}

TEST_F(ClientChannelTest, ReliefTheNodeBudgetAsksForGoesOutBeforeAnOwedDecision) {
  config_.limits.plans_in_flight = 1;  // one plan per turn: which goes first is the point
  // 8 rows on the node, half each for this client and a tenant holding 2.
  start(8);
  tenant_.emplace(2, row_bytes_, 2);
  budget_->join(*tenant_);

  // Sequence 1 (T2 on) takes 6 rows: 12 tokens, the lowest 6 to T1. That is 2 over its share.
  tier::TierParams t2 = every_step();
  t2.int8_ratio = 0.5;
  channel_->open_sequence(1, 0, t2, 0);
  push_scores(1, 0, ascending(12, 1.0f));
  end_step(1);
  ASSERT_EQ(plan_records().size(), 1u);
  ack(1);
  ASSERT_EQ(sequence(channel_->snapshot(), 1)->tokens_t1, 6u);

  // Sequence 2 evicts half and keeps the rest in T0 (no rows wanted); its plan is epoch 2.
  tier::TierParams evicting = every_step(1.0);
  evicting.evict_ratio = 0.5;
  channel_->open_sequence(2, 0, evicting, 0);
  push_scores(2, 0, ascending(8, 1.0f));
  end_step(2);
  ASSERT_EQ(plan_records().size(), 1u);
  // Its next decision is due while epoch 2 is out: owed. Four new low tokens: two more evicted.
  push_scores(2, 8, {0.1f, 0.2f, 0.3f, 0.4f});
  end_step(2);
  EXPECT_TRUE(plan_records().empty());

  // The tenant under its share is refused rows: the budget asks this client, over its share.
  const Admission admission = budget_->admit(*tenant_, 2);
  EXPECT_EQ(admission.rows, 0u);
  EXPECT_EQ(kicked_, (std::vector<std::uint32_t>{kClient}));
  EXPECT_TRUE(channel_->relief_pending());

  ack(2);  // the channel's next free turn: relief first
  std::vector<shm::PlanRecord> records = plan_records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].epoch, 3u);
  EXPECT_EQ(records[0].sequence, 1u);
  ASSERT_EQ(records[0].move_count, 4u);  // two rows asked, a whole int8 block of 4 given
  for (std::uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(records[0].moves[i].from_tier, shm::kTierDdr);
    EXPECT_EQ(records[0].moves[i].to_tier, shm::kTierInt8);
  }

  ack(3);  // then the owed decision
  records = plan_records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].epoch, 4u);
  EXPECT_EQ(records[0].sequence, 2u);
  ASSERT_EQ(records[0].move_count, 2u);
  EXPECT_EQ(records[0].moves[0].to_tier, shm::kTierDropped);
  const ClientSnapshot s = channel_->snapshot();
  EXPECT_EQ(s.pressure_demotions, 4u);
  EXPECT_EQ(sequence(s, 1)->tokens_t1, 2u);
  EXPECT_EQ(sequence(s, 1)->tokens_t2, 4u);
  EXPECT_EQ(s.ddr_bytes_used, 2 * row_bytes_);
  EXPECT_FALSE(channel_->relief_pending());
  EXPECT_TRUE(errors_.empty());
}

// The DataPlane services a channel from several places (a close, relief, the drain's polling
// while kvtierd stops), each service() ending with the doorbell armed. A ring just before the
// channel goes must run nothing of it afterwards: kvtierd died of SIGSEGV stopping while a client
// rang, a second wait's handler writing to the unmapped control segment.
TEST_F(ClientChannelTest, ADoorbellRungJustBeforeTheChannelGoesRunsNothingOfItAfterwards) {
  start();
  channel_->open_sequence(1, 0, every_step(), 0);
  channel_->service();
  channel_->service();
  const std::uint64_t one = 1;
  ASSERT_EQ(::write(doorbell_.get(), &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  // The ring is served, then the channel goes (DataPlane::detach), then whatever the ring left.
  asio::post(io_, [this] { asio::post(io_, [this] { channel_.reset(); }); });
  io_.restart();
  io_.poll();
  EXPECT_EQ(channel_, nullptr);
  EXPECT_TRUE(errors_.empty());
}

}  // namespace
}  // namespace kvtier::daemon::testing
