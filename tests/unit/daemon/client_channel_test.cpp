// ClientChannel (daemon/src/client_channel.hpp) in process: real control, pool and int8 pool
// segments created as the Server creates them (the fuzz target's harness does the same), an
// eventfd doorbell, and the client's ends of both rings (ScoreProducer, PlanConsumer) played by
// the test. Deterministic: no threads, no sleeps; the test rings the doorbell and polls the
// io_context itself, so the channel serves the rings exactly when the test says.
#include "client_channel.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <spdlog/logger.h>

#include "kvtier/shm/control_segment.hpp"
#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/pool_segment.hpp"
#include "kvtier/shm/segment.hpp"

namespace kvtier::daemon {
namespace {

constexpr std::uint32_t kClient = 1;
constexpr std::uint64_t kEpoch = 0xc4a1;
constexpr std::uint32_t kSlots = 32;

// Positions [0, n) with ascending scores (position p gets first + p), so a decision's split is
// known: the lowest positions leave T0 first.
std::vector<float> ascending(std::uint32_t n, float first) {
  std::vector<float> values(n);
  for (std::uint32_t p = 0; p < n; ++p) values[p] = first + static_cast<float>(p);
  return values;
}

// No protected tokens beyond the prompt (which is empty here), a decision every step.
tier::TierParams every_step(double hbm_ratio = 0.5) {
  tier::TierParams p;
  p.sink_tokens = 0;
  p.window_tokens = 0;
  p.interval = 1;
  p.hbm_ratio = hbm_ratio;
  return p;
}

// Another tenant of the node budget, holding `rows` rows and asking for more.
class Tenant final : public BudgetMember {
 public:
  Tenant(std::uint32_t id, std::uint64_t row_bytes, std::uint32_t rows) : id_(id), row_(row_bytes), rows_(rows) {}
  std::uint32_t client_id() const noexcept override { return id_; }
  bool has_pool() const noexcept override { return true; }
  std::uint32_t weight() const noexcept override { return 1; }
  std::uint64_t bytes_per_slot() const noexcept override { return row_; }
  std::uint64_t ddr_bytes_used() const noexcept override { return rows_ * row_; }
  bool relief_pending() const noexcept override { return false; }
  void lowest_t1(std::size_t, std::vector<ReliefCandidate>&) const override {}
  void request_relief(std::vector<ReliefCandidate>) override {}

 private:
  std::uint32_t id_;
  std::uint64_t row_;
  std::uint32_t rows_;
};

class ClientChannelTest : public ::testing::Test {
 protected:
  ~ClientChannelTest() override {
    channel_.reset();
    if (tenant_) budget_->leave(tenant_->client_id());
  }

  // Builds the channel with pools of kSlots rows and `int8_blocks` int8 blocks of 4 tokens;
  // `budget_rows` > 0 sets a node DDR budget of that many rows.
  void start(std::uint32_t budget_rows = 0, std::uint32_t int8_blocks = 2) {
    config_.limits.max_tokens_per_sequence = 1024;
    config_.pools.pressure = "demote";
    config_.pools.int8_group_tokens = 4;
    auto geometry = shm::make_pool_geometry(1, 1, 8, 2, kSlots);
    ASSERT_TRUE(geometry);
    row_bytes_ = geometry->row_bytes() * geometry->num_layers;
    config_.pools.ddr_bytes_total = budget_rows * row_bytes_;
    budget_.emplace(config_.pools, [this](std::uint32_t id) { kicked_.push_back(id); });

    auto layout = shm::ControlLayout::make(64, 8);
    ASSERT_TRUE(layout);
    auto control = shm::create_control_segment(name(shm::SegmentKind::kControl), *layout, kEpoch, kClient);
    ASSERT_TRUE(control) << control.error().message;
    const std::span<std::byte> bytes = control->bytes();
    const shm::ControlBlock& block = layout->block();
    scores_.emplace(bytes.subspan(block.score_ring_offset, block.score_ring_bytes), block.score_capacity);
    plans_.emplace(bytes.subspan(block.plan_ring_offset, block.plan_ring_bytes), block.plan_capacity);
    const int doorbell = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ASSERT_GE(doorbell, 0);
    auto client_end = UniqueFd::duplicate(doorbell);
    ASSERT_TRUE(client_end);
    doorbell_ = std::move(*client_end);
    channel_ = std::make_unique<ClientChannel>(
        io_, kClient, std::move(*control), *layout, UniqueFd(doorbell), config_, *budget_, log_,
        [this](const Error& error) { errors_.push_back(error); },
        [](const HandoffOrigin&, std::optional<tier::SequenceTiers>) {});

    auto pool = shm::create_pool_segment(name(shm::SegmentKind::kPool), *geometry, kEpoch, kClient);
    ASSERT_TRUE(pool) << pool.error().message;
    PoolSetup setup{std::move(*pool), *geometry, std::nullopt, kernels::KvDtype::kF16, 1};
    auto int8_geometry = shm::make_int8_pool_geometry(1, 1, 8, config_.pools.int8_group_tokens, int8_blocks);
    ASSERT_TRUE(int8_geometry);
    auto int8 = shm::create_int8_pool_segment(name(shm::SegmentKind::kInt8Pool), *int8_geometry, kEpoch, kClient);
    ASSERT_TRUE(int8) << int8.error().message;
    setup.int8.emplace(Int8Pool{std::move(*int8), *int8_geometry});
    channel_->set_pool(std::move(setup));
  }

  static std::string name(shm::SegmentKind kind) {
    // Unique per process and test: ctest runs each test in its own process, in parallel.
    auto name = shm::segment_name("cct" + std::to_string(::getpid()), kClient, kind);
    EXPECT_TRUE(name);
    return *name;
  }

  // The client: pushes, then rings the doorbell; the channel serves on the poll.
  void push_scores(std::uint32_t sequence, std::uint32_t first, const std::vector<float>& values) {
    shm::ScoreRecord r{};
    r.sequence = sequence;
    r.kind = static_cast<std::uint16_t>(shm::ScoreKind::kAttention);
    r.first_position = first;
    r.count = static_cast<std::uint16_t>(values.size());
    std::copy(values.begin(), values.end(), r.values);
    ASSERT_NE(scores_->push(r), shm::PushResult::kDropped);
  }
  void end_step(std::uint32_t sequence) {
    shm::ScoreRecord r{};
    r.sequence = sequence;
    r.kind = static_cast<std::uint16_t>(shm::ScoreKind::kStepEnd);
    r.step = steps_[sequence]++;
    ASSERT_NE(scores_->push(r), shm::PushResult::kDropped);
    wake();
  }
  void ack(std::uint64_t epoch) {
    (void)plans_->ack(epoch);
    wake();
  }
  void fail(std::uint64_t epoch) {
    (void)plans_->fail(epoch);
    wake();
  }
  void wake() {
    const std::uint64_t one = 1;
    ASSERT_EQ(::write(doorbell_.get(), &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
    io_.restart();
    io_.poll();
  }
  // Every plan record published since the last call.
  std::vector<shm::PlanRecord> plan_records() {
    std::vector<shm::PlanRecord> out(8);
    auto popped = plans_->pop(out);
    EXPECT_TRUE(popped) << popped.error().message;
    out.resize(popped ? *popped : 0);
    return out;
  }
  static const SequenceSnapshot* sequence(const ClientSnapshot& snapshot, std::uint32_t id) {
    for (const SequenceSnapshot& s : snapshot.sequences) {
      if (s.sequence_id == id) return &s;
    }
    return nullptr;
  }
  // Opens sequence 1 and makes it decide: 8 tokens, scores 1..8, the lowest 4 move to T1.
  void decide_once() {
    channel_->open_sequence(1, 0, every_step(), 0);
    push_scores(1, 0, ascending(8, 1.0f));
    end_step(1);
  }

  asio::io_context io_;
  spdlog::logger log_{"client_channel_test"};
  config::DaemonConfig config_;
  std::optional<NodeBudget> budget_;
  std::optional<Tenant> tenant_;
  std::unique_ptr<ClientChannel> channel_;
  std::uint64_t row_bytes_ = 0;
  std::optional<shm::ScoreProducer> scores_;
  std::optional<shm::PlanConsumer> plans_;
  UniqueFd doorbell_;  // the client's end
  std::map<std::uint32_t, std::uint32_t> steps_;
  std::vector<Error> errors_;
  std::vector<std::uint32_t> kicked_;
};

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

}  // namespace
}  // namespace kvtier::daemon
