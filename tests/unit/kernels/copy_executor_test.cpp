// CPU CopyExecutor: offload/restore round trips for HF and paged layouts, pool row byte layout,
// partial layer ranges, errors, and the backend factory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kvtier/kernels/executor.hpp"
#include "kvtier/kernels/executor_factory.hpp"

namespace kvtier::kernels {
namespace {

enum class Kind { kHf, kPagedNhd, kPagedHnd };

constexpr std::uint32_t kLayers = 3;
constexpr std::uint32_t kHeads = 4;
constexpr std::uint32_t kDim = 32;
constexpr std::uint32_t kBlocks = 6;
constexpr std::uint32_t kBlockSize = 8;
constexpr std::uint32_t kSlots = kBlocks * kBlockSize;
constexpr std::uint32_t kPoolSlots = 40;

// Byte offset of (slot, head) in one layer tensor, written out per layout independently of
// KvLayout::slot_offset so the executor is checked against the tensor shapes themselves.
std::size_t offset_of(Kind kind, std::uint32_t slot, std::uint32_t head, std::size_t es) {
  const std::size_t b = slot / kBlockSize, t = slot % kBlockSize;
  switch (kind) {
    case Kind::kHf:  // [heads, slots, dim]
      return (std::size_t{head} * kSlots + slot) * kDim * es;
    case Kind::kPagedNhd:  // [blocks, block_size, heads, dim]
      return ((b * kBlockSize + t) * kHeads + head) * kDim * es;
    case Kind::kPagedHnd:  // [blocks, heads, block_size, dim]
      return ((b * kHeads + head) * kBlockSize + t) * kDim * es;
  }
  return 0;
}

class CopyExecutorTest : public ::testing::TestWithParam<std::pair<Kind, KvDtype>> {
 protected:
  void SetUp() override {
    kind_ = GetParam().first;
    es_ = dtype_bytes(GetParam().second);
    const std::size_t tensor = std::size_t{kSlots} * kHeads * kDim * es_;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> byte(1, 255);  // never zero: a missed copy shows
    std::vector<std::uintptr_t> k, v;
    for (std::uint32_t l = 0; l < 2 * kLayers; ++l) {
      cache_.emplace_back(tensor);
      for (std::byte& x : cache_.back()) x = static_cast<std::byte>(byte(rng));
    }
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      k.push_back(reinterpret_cast<std::uintptr_t>(cache_[2 * l].data()));
      v.push_back(reinterpret_cast<std::uintptr_t>(cache_[2 * l + 1].data()));
    }
    const KvDtype dtype = GetParam().second;
    switch (kind_) {
      case Kind::kHf:
        layout_ = make_hf_layout(kLayers, kHeads, kDim, dtype, kSlots, k, v);
        break;
      case Kind::kPagedNhd:
        layout_ = make_paged_layout(kLayers, kHeads, kDim, dtype, kBlocks, kBlockSize, k, v);
        break;
      case Kind::kPagedHnd:
        layout_ = make_paged_hnd_layout(kLayers, kHeads, kDim, dtype, kBlocks, kBlockSize, k, v);
        break;
    }
    const std::size_t layer_stride = std::size_t{kPoolSlots} * layout_.row_bytes() + 64;
    pool_storage_.assign(layer_stride * kLayers, std::byte{0});
    pool_ = PoolView{pool_storage_.data(), layout_.row_bytes(), layer_stride, kPoolSlots, kLayers};
    auto made = make_executor(Backend::kCpu);
    ASSERT_TRUE(made) << made.error().message;
    executor_ = std::move(*made);
    ASSERT_TRUE(executor_->initialize(layout_, pool_));
  }

  const std::byte* head_bytes(std::uint32_t layer, int kv, std::uint32_t slot,
                              std::uint32_t head) const {
    return cache_[2 * layer + kv].data() + offset_of(kind_, slot, head, es_);
  }

  Kind kind_{};
  std::size_t es_ = 0;
  std::vector<std::vector<std::byte>> cache_;  // per layer: K, V
  KvLayout layout_;
  std::vector<std::byte> pool_storage_;
  PoolView pool_;
  std::unique_ptr<CopyExecutor> executor_;
};

TEST_P(CopyExecutorTest, OffloadWritesKHeadsThenVHeadsIntoEachPoolRow) {
  const std::vector<RowCopy> copies{{0, 5}, {9, 0}, {10, 1}, {47, 39}, {8, 2}};
  ASSERT_TRUE(executor_->offload(copies));
  const std::size_t hb = std::size_t{kDim} * es_;
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    for (const RowCopy& c : copies) {
      const std::byte* row = pool_.row(l, c.pool_slot);
      for (int kv = 0; kv < 2; ++kv) {
        for (std::uint32_t h = 0; h < kHeads; ++h) {
          const std::byte* pooled = row + (std::size_t(kv) * kHeads + h) * hb;
          EXPECT_EQ(std::memcmp(pooled, head_bytes(l, kv, c.hbm_slot, h), hb), 0)
              << "layer " << l << " kv " << kv << " head " << h << " slot " << c.hbm_slot;
        }
      }
    }
  }
}

TEST_P(CopyExecutorTest, OffloadThenRestoreRoundTripsBitExactlyIntoOtherSlots) {
  const auto original = cache_;
  std::vector<std::uint32_t> hbm(kSlots);
  std::iota(hbm.begin(), hbm.end(), 0u);
  std::shuffle(hbm.begin(), hbm.end(), std::mt19937(3));
  std::vector<RowCopy> out, back;
  for (std::uint32_t i = 0; i < 20; ++i) out.push_back({hbm[i], kPoolSlots - 1 - i});
  ASSERT_TRUE(executor_->offload(out));
  // Wipe every offloaded slot, then restore each token into another token's old slot.
  for (auto& tensor : cache_) std::fill(tensor.begin(), tensor.end(), std::byte{0});
  for (std::uint32_t i = 0; i < 20; ++i) back.push_back({hbm[(i + 1) % 20], out[i].pool_slot});
  ASSERT_TRUE(executor_->restore(back));
  const std::size_t hb = std::size_t{kDim} * es_;
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      for (std::uint32_t i = 0; i < 20; ++i) {
        for (std::uint32_t h = 0; h < kHeads; ++h) {
          const std::byte* want =
              original[2 * l + kv].data() + offset_of(kind_, out[i].hbm_slot, h, es_);
          EXPECT_EQ(std::memcmp(head_bytes(l, kv, back[i].hbm_slot, h), want, hb), 0);
        }
      }
      // Nothing outside the restored slots was written.
      const auto zeros =
          std::count(cache_[2 * l + kv].begin(), cache_[2 * l + kv].end(), std::byte{0});
      EXPECT_EQ(static_cast<std::size_t>(zeros), (kSlots - 20) * kHeads * hb);
    }
  }
}

TEST_P(CopyExecutorTest, CopyLayersTouchesOnlyTheGivenLayers) {
  const std::vector<RowCopy> copies{{3, 3}, {4, 4}};
  ASSERT_TRUE(executor_->copy_layers(Direction::kOffload, copies, 1, 1));
  const auto untouched = [&](std::uint32_t layer) {
    const std::byte* row = pool_.row(layer, 3);
    return std::all_of(row, row + 2 * pool_.row_bytes,
                       [](std::byte b) { return b == std::byte{0}; });
  };
  EXPECT_TRUE(untouched(0));
  EXPECT_FALSE(untouched(1));
  EXPECT_TRUE(untouched(2));
  EXPECT_FALSE(executor_->copy_layers(Direction::kOffload, copies, 1, 3));
  EXPECT_FALSE(executor_->copy_layers(Direction::kOffload, copies, kLayers, kAllLayers));
}

TEST_P(CopyExecutorTest, BadCopyListIsRejectedAndCopiesNothing) {
  const std::vector<RowCopy> out_of_range{{1, 1}, {kSlots, 2}};
  const auto s = executor_->offload(out_of_range);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::kInvalidArgument);
  EXPECT_NE(s.error().message.find("hbm_slot 48 >= num_slots 48"), std::string::npos);
  EXPECT_TRUE(std::all_of(pool_storage_.begin(), pool_storage_.end(),
                          [](std::byte b) { return b == std::byte{0}; }));
  const std::vector<RowCopy> bad_pool{{1, kPoolSlots}};
  EXPECT_FALSE(executor_->restore(bad_pool));
  const std::vector<RowCopy> same_destination{{1, 7}, {2, 7}};
  const auto dup = executor_->offload(same_destination);
  ASSERT_FALSE(dup);
  EXPECT_NE(dup.error().message.find("pool_slot 7 appears more than once"), std::string::npos);
  const std::vector<RowCopy> same_hbm{{1, 7}, {1, 8}};
  EXPECT_FALSE(executor_->restore(same_hbm));
  EXPECT_TRUE(executor_->offload(same_hbm));  // one token into two rows is well defined
}

INSTANTIATE_TEST_SUITE_P(Layouts, CopyExecutorTest,
                         ::testing::Values(std::pair{Kind::kHf, KvDtype::kF16},
                                           std::pair{Kind::kHf, KvDtype::kF32},
                                           std::pair{Kind::kPagedNhd, KvDtype::kBf16},
                                           std::pair{Kind::kPagedHnd, KvDtype::kF16}));

TEST(CopyExecutor, OperationsBeforeInitializeFailWithBadState) {
  auto executor = make_executor(Backend::kCpu);
  ASSERT_TRUE(executor);
  const std::vector<RowCopy> copies{{0, 0}};
  const auto s = (*executor)->offload(copies);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::kBadState);
  EXPECT_FALSE((*executor)->synchronize());
}

TEST(CopyExecutor, InitializeRejectsAMismatchedPool) {
  std::vector<std::byte> k(4096), v(4096), pool_bytes(4096);
  const KvLayout layout =
      make_hf_layout(1, 2, 8, KvDtype::kF16, 16, {reinterpret_cast<std::uintptr_t>(k.data())},
                     {reinterpret_cast<std::uintptr_t>(v.data())});
  const PoolView pool{pool_bytes.data(), 32, 4096, 16, 1};  // rows must be 64 bytes
  auto executor = make_executor(Backend::kCpu);
  ASSERT_TRUE(executor);
  EXPECT_FALSE((*executor)->can_implement(layout, pool));
  EXPECT_FALSE((*executor)->initialize(layout, pool));
}

// K and V of a token interleaved exactly like a pool row: consecutive slots on both sides merge
// into one run spanning rows, the widest coalescing path.
TEST(CopyExecutor, PoolShapedCacheRoundTripsAcrossMergedRuns) {
  constexpr std::uint32_t kHeadsHere = 2, kDimHere = 8, kSlotsHere = 16;
  const std::size_t half = kHeadsHere * kDimHere * 2, row = 2 * half;
  std::vector<std::byte> cache(kSlotsHere * row), pool_bytes(kSlotsHere * row, std::byte{0});
  for (std::size_t i = 0; i < cache.size(); ++i) cache[i] = static_cast<std::byte>(i % 251 + 1);
  const auto base = reinterpret_cast<std::uintptr_t>(cache.data());
  KvLayout layout =
      make_hf_layout(1, kHeadsHere, kDimHere, KvDtype::kF16, kSlotsHere, {base}, {base + half});
  layout.token_stride = row;
  layout.head_stride = layout.head_bytes();
  ASSERT_TRUE(validate(layout));
  const PoolView pool{pool_bytes.data(), row, kSlotsHere * row, kSlotsHere, 1};
  auto executor = make_executor(Backend::kCpu);
  ASSERT_TRUE(executor && (*executor)->initialize(layout, pool));
  const std::vector<RowCopy> copies{{2, 5}, {3, 6}, {4, 7}, {9, 0}, {10, 1}};
  ASSERT_TRUE((*executor)->offload(copies));
  for (const RowCopy& c : copies) {
    EXPECT_EQ(std::memcmp(pool.row(0, c.pool_slot), cache.data() + c.hbm_slot * row, row), 0);
  }
  const auto original = cache;
  std::fill(cache.begin(), cache.end(), std::byte{0});
  ASSERT_TRUE((*executor)->restore(copies));
  for (const RowCopy& c : copies) {
    EXPECT_EQ(std::memcmp(cache.data() + c.hbm_slot * row, original.data() + c.hbm_slot * row, row),
              0);
  }
}

TEST(CopyExecutor, CudaBackendIsUnavailableWithAReasonWhenNotBuilt) {
  if (backend_built(Backend::kCuda)) GTEST_SKIP() << "CUDA backend built";
  auto executor = make_executor(Backend::kCuda);
  ASSERT_FALSE(executor);
  EXPECT_EQ(executor.error().code, Errc::kUnavailable);
  EXPECT_NE(executor.error().message.find("without CUDA"), std::string::npos);
  EXPECT_TRUE(backend_built(Backend::kCpu));
}

}  // namespace
}  // namespace kvtier::kernels
