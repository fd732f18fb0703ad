// CopyExecutor::prefetch: staging buffer layout, compact vs position order, request checks.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kvtier/kernels/executor.hpp"
#include "kvtier/kernels/executor_factory.hpp"

namespace kvtier::kernels {
namespace {

constexpr std::uint32_t kLayers = 2;
constexpr std::uint32_t kHeads = 2;
constexpr std::uint32_t kDim = 4;
constexpr std::uint32_t kPoolSlots = 16;

class StagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    k_.resize(std::size_t{kHeads} * kDim * 8 * kLayers);
    v_.resize(k_.size());
    std::vector<std::uintptr_t> k, v;
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      k.push_back(reinterpret_cast<std::uintptr_t>(k_.data() + l * kHeads * kDim * 8));
      v.push_back(reinterpret_cast<std::uintptr_t>(v_.data() + l * kHeads * kDim * 8));
    }
    layout_ = make_hf_layout(kLayers, kHeads, kDim, KvDtype::kF32, 8, k, v);
    // Pool element (layer, slot, e) = 1000 * layer + 100 * slot + e + 1: never zero, all distinct.
    pool_floats_.resize(std::size_t{kLayers} * kPoolSlots * row_floats());
    for (std::size_t i = 0; i < pool_floats_.size(); ++i) {
      const std::size_t layer = i / (kPoolSlots * row_floats());
      const std::size_t slot = (i / row_floats()) % kPoolSlots;
      pool_floats_[i] = static_cast<float>(1000 * layer + 100 * slot + i % row_floats() + 1);
    }
    pool_ = PoolView{reinterpret_cast<std::byte*>(pool_floats_.data()), row_floats() * 4,
                     kPoolSlots * row_floats() * 4, kPoolSlots, kLayers};
    executor_ = std::move(*make_executor(Backend::kCpu));
    ASSERT_TRUE(executor_->initialize(layout_, pool_));
    staging_.assign(kPoolSlots * row_floats(), 0.0f);
    buffer_.data = reinterpret_cast<std::uintptr_t>(staging_.data());
    buffer_.capacity_bytes = staging_.size() * sizeof(float);
  }

  static std::size_t row_floats() { return 2 * kHeads * kDim; }
  float pool_at(std::uint32_t layer, std::uint32_t slot, std::size_t e) const {
    return pool_floats_[(layer * kPoolSlots + slot) * row_floats() + e];
  }

  // Staged row i must be pool row slots[i]: K half at k() + i, V half at v() + i.
  void expect_staged(std::uint32_t layer, const std::vector<std::uint32_t>& slots) const {
    const auto* k = reinterpret_cast<const float*>(buffer_.k());
    const auto* v = reinterpret_cast<const float*>(buffer_.v());
    const std::size_t half = kHeads * kDim;
    ASSERT_EQ(buffer_.rows, slots.size());
    EXPECT_EQ(buffer_.v() - buffer_.k(), slots.size() * half * sizeof(float));
    for (std::size_t i = 0; i < slots.size(); ++i) {
      for (std::size_t e = 0; e < half; ++e) {
        EXPECT_EQ(k[i * half + e], pool_at(layer, slots[i], e));
        EXPECT_EQ(v[i * half + e], pool_at(layer, slots[i], half + e));
      }
    }
  }

  std::vector<float> k_, v_, pool_floats_, staging_;
  KvLayout layout_;
  PoolView pool_;
  std::unique_ptr<CopyExecutor> executor_;
  StagingBuffer buffer_;
};

TEST_F(StagingTest, CompactStagesRowsInTheGivenOrderAsKRowsThenVRows) {
  const std::vector<std::uint32_t> slots{9, 2, 3, 15, 0};
  ASSERT_TRUE(executor_->prefetch(1, slots, {}, StagingOrder::kCompact, buffer_));
  ASSERT_TRUE(executor_->wait(1));
  EXPECT_EQ(buffer_.layer, 1u);
  EXPECT_EQ(buffer_.order, StagingOrder::kCompact);
  EXPECT_TRUE(buffer_.positions.empty());
  EXPECT_EQ(buffer_.half_row_bytes, kHeads * kDim * sizeof(float));
  expect_staged(1, slots);
}

TEST_F(StagingTest, CompactKeepsPositionsInAnyOrder) {
  const std::vector<std::uint32_t> slots{4, 1}, positions{90, 12};
  ASSERT_TRUE(executor_->prefetch(0, slots, positions, StagingOrder::kCompact, buffer_));
  EXPECT_EQ(buffer_.positions, positions);
  expect_staged(0, slots);
}

TEST_F(StagingTest, PositionOrderStagesRowsWithTheirAscendingPositions) {
  const std::vector<std::uint32_t> slots{7, 1, 12}, positions{3, 10, 11};
  ASSERT_TRUE(executor_->prefetch(0, slots, positions, StagingOrder::kPositionOrder, buffer_));
  EXPECT_EQ(buffer_.order, StagingOrder::kPositionOrder);
  EXPECT_EQ(buffer_.positions, positions);
  expect_staged(0, slots);
}

TEST_F(StagingTest, PositionOrderRejectsMissingOrUnsortedPositions) {
  const std::vector<std::uint32_t> slots{7, 1, 12};
  EXPECT_FALSE(executor_->prefetch(0, slots, {}, StagingOrder::kPositionOrder, buffer_));
  const std::vector<std::uint32_t> unsorted{3, 11, 10};
  const auto s = executor_->prefetch(0, slots, unsorted, StagingOrder::kPositionOrder, buffer_);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("strictly ascending"), std::string::npos);
  const std::vector<std::uint32_t> repeated{3, 10, 10};
  EXPECT_FALSE(executor_->prefetch(0, slots, repeated, StagingOrder::kPositionOrder, buffer_));
  const std::vector<std::uint32_t> short_list{3, 10};
  EXPECT_FALSE(executor_->prefetch(0, slots, short_list, StagingOrder::kCompact, buffer_));
}

TEST_F(StagingTest, RejectsBadLayerSlotAndTooSmallBuffer) {
  const std::vector<std::uint32_t> slots{1, 2};
  EXPECT_FALSE(executor_->prefetch(kLayers, slots, {}, StagingOrder::kCompact, buffer_));
  const std::vector<std::uint32_t> bad{1, kPoolSlots};
  EXPECT_FALSE(executor_->prefetch(0, bad, {}, StagingOrder::kCompact, buffer_));
  buffer_.capacity_bytes = pool_.row_bytes * 2 - 1;
  const auto s = executor_->prefetch(0, slots, {}, StagingOrder::kCompact, buffer_);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("2 rows need 128"), std::string::npos) << s.error().message;
}

TEST_F(StagingTest, NoSlotsStagesNothing) {
  StagingBuffer empty;
  ASSERT_TRUE(executor_->prefetch(0, {}, {}, StagingOrder::kPositionOrder, empty));
  EXPECT_EQ(empty.rows, 0u);
}

}  // namespace
}  // namespace kvtier::kernels
