// libkvtier's side of plans in flight, with this test process as the engine client of a real
// kvtierd (C ABI): plans of two sequences polled before either is acknowledged, acknowledged
// out of order; acks of a plan never polled or acknowledged twice are refused locally
// (KVTIER_E_INVALID_ARGUMENT) and never reach kvtierd, whose session stays up; a plan of a
// sequence closed meanwhile takes its ack and goes nowhere. Lockstep: kvtier_client_sync after
// each step end, so both decisions are on the ring when the test polls.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvtier/kvtier.h"
#include "process.hpp"

namespace kvtier::testing {
namespace {

std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

constexpr std::uint32_t kTokens = 16;
// Ends only a run whose daemon is stuck; no test here depends on how fast kvtierd answers.
constexpr int kStuckDaemonMs = 60000;

class PlanAck : public ::testing::Test {
 protected:
  void SetUp() override {
    kvtier_connect_options connect;
    kvtier_connect_options_init(&connect);
    const std::string socket = daemon_.socket().string();
    connect.socket_path = socket.c_str();
    ASSERT_EQ(kvtier_client_connect(&connect, &client_), KVTIER_OK) << kvtier_client_last_error(nullptr);
    kvtier_model_geometry g;
    kvtier_model_geometry_init(&g);
    g.num_layers = 1;
    g.num_kv_heads = 1;
    g.head_dim = 8;
    g.dtype = KVTIER_DTYPE_F16;
    g.pool_tokens = 64;
    ASSERT_EQ(kvtier_model_register(client_, &g), KVTIER_OK) << kvtier_client_last_error(client_);
    for (std::uint32_t& id : ids_) {
      kvtier_sequence_options o;
      kvtier_sequence_options_init(&o);
      o.use_defaults = 0;
      o.sink_tokens = 0;
      o.window_tokens = 0;
      o.interval = 1;
      o.hbm_ratio = 0.5;
      ASSERT_EQ(kvtier_sequence_open_with(client_, &o, &id), KVTIER_OK) << kvtier_client_last_error(client_);
    }
  }
  void TearDown() override { kvtier_client_free(client_); }

  // Both sequences end step 0 with ascending scores: each decides, its lower half to T1.
  std::vector<kvtier_plan> decide_both() {
    std::vector<float> scores(kTokens);
    for (std::uint32_t p = 0; p < kTokens; ++p) scores[p] = 1.0f + static_cast<float>(p);
    for (const std::uint32_t id : ids_) {
      EXPECT_EQ(kvtier_scores_push(client_, id, 0, 0, scores.data(), kTokens), KVTIER_OK);
      EXPECT_EQ(kvtier_sequence_step_end(client_, id, 0), KVTIER_OK);
    }
    EXPECT_EQ(kvtier_client_sync(client_, kStuckDaemonMs), KVTIER_OK);
    std::vector<kvtier_plan> plans;
    kvtier_plan plan;
    while (kvtier_plan_poll(client_, 0, &plan) == KVTIER_OK) plans.push_back(plan);
    return plans;
  }

  DaemonUnderTest daemon_{test_name()};
  kvtier_client* client_ = nullptr;
  std::uint32_t ids_[2] = {};
};

TEST_F(PlanAck, PlansOfTwoSequencesArePolledTogetherAndAcknowledgedOutOfOrder) {
  const std::vector<kvtier_plan> plans = decide_both();
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_NE(plans[0].sequence, plans[1].sequence);
  EXPECT_EQ(plans[0].move_count, kTokens / 2);  // the first plan's moves outlive the second poll
  EXPECT_EQ(kvtier_plan_ack(client_, plans[1].epoch, 1), KVTIER_OK);
  EXPECT_EQ(kvtier_plan_ack(client_, plans[0].epoch, 1), KVTIER_OK);
  EXPECT_EQ(kvtier_client_sync(client_, kStuckDaemonMs), KVTIER_OK);  // kvtierd resolved both: session intact
}

TEST_F(PlanAck, AnAckOfAPlanNotPolledOrAcknowledgedTwiceIsRefusedAndTheSessionStays) {
  const std::vector<kvtier_plan> plans = decide_both();
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(kvtier_plan_ack(client_, plans[1].epoch + 10, 1), KVTIER_E_INVALID_ARGUMENT);
  EXPECT_EQ(kvtier_plan_ack(client_, plans[0].epoch, 0), KVTIER_OK);
  EXPECT_EQ(kvtier_plan_ack(client_, plans[0].epoch, 1), KVTIER_E_INVALID_ARGUMENT);
  EXPECT_EQ(kvtier_plan_ack(client_, plans[1].epoch, 1), KVTIER_OK);
  EXPECT_EQ(kvtier_client_sync(client_, kStuckDaemonMs), KVTIER_OK);
  const CommandResult status = daemon_.ctl({"status", "--json"});
  EXPECT_NE(status.out.find("\"plans_failed\":1"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("\"errors\":0"), std::string::npos) << status.out;
}

TEST_F(PlanAck, ThePlanOfASequenceClosedMeanwhileTakesItsAckAndGoesNowhere) {
  const std::vector<kvtier_plan> plans = decide_both();
  ASSERT_EQ(plans.size(), 2u);
  ASSERT_EQ(kvtier_sequence_close(client_, plans[0].sequence), KVTIER_OK);
  EXPECT_EQ(kvtier_plan_ack(client_, plans[0].epoch, 1), KVTIER_OK);
  EXPECT_EQ(kvtier_plan_ack(client_, plans[1].epoch, 1), KVTIER_OK);
  EXPECT_EQ(kvtier_client_sync(client_, kStuckDaemonMs), KVTIER_OK);
  const CommandResult status = daemon_.ctl({"status", "--json"});
  EXPECT_NE(status.out.find("\"plans_acked\":1"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("\"errors\":0"), std::string::npos) << status.out;
}

}  // namespace
}  // namespace kvtier::testing
