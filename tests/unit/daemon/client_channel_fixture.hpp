// The ClientChannel test fixture (daemon/src/client_channel.hpp) in process, shared by
// client_channel_test.cpp and client_channel_window_test.cpp: real control, pool and int8 pool
// segments created as the Server creates them (the fuzz target's harness does the same), an
// eventfd doorbell, and the client's ends of both rings (ScoreProducer, PlanConsumer) played by
// the test. Deterministic: no threads, no sleeps; the test rings the doorbell and polls the
// io_context itself, so the channel serves the rings exactly when the test says.
#pragma once

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

namespace kvtier::daemon::testing {

inline constexpr std::uint32_t kClient = 1;
inline constexpr std::uint64_t kEpoch = 0xc4a1;
inline constexpr std::uint32_t kSlots = 32;

// Positions [0, n) with ascending scores (position p gets first + p), so a decision's split is
// known: the lowest positions leave T0 first.
inline std::vector<float> ascending(std::uint32_t n, float first) {
  std::vector<float> values(n);
  for (std::uint32_t p = 0; p < n; ++p) values[p] = first + static_cast<float>(p);
  return values;
}

// No protected tokens beyond the prompt (which is empty here), a decision every step.
inline tier::TierParams every_step(double hbm_ratio = 0.5) {
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
  // Opens `id` and makes it decide: 8 tokens, scores 1..8, the lowest 4 move to T1.
  void decide_once(std::uint32_t id = 1) {
    channel_->open_sequence(id, 0, every_step(), 0);
    push_scores(id, 0, ascending(8, 1.0f));
    end_step(id);
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

}  // namespace kvtier::daemon::testing
