// SequenceCache executing a hand-off plan (an adopted sequence's first plan) on the CPU backend,
// without a daemon: the "exporter's cache" is a paged layout over host memory of this process.
// KVTIER_TPEER -> T0 copies rows bit-identical from the peer's slot into the engine's slot (every
// layer, K and V); -> T1 / -> T2 only record the pool rows the daemon filled; every bad move is
// refused before anything is copied or recorded.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/layout.hpp"
#include "sequence_cache.hpp"

namespace kvtier::client {
namespace {

constexpr std::uint32_t kLayers = 2, kHeads = 2, kDim = 8, kSlots = 16, kPoolSlots = 8, kGroup = 4;
constexpr std::uint32_t kPeerBlocks = 3, kPeerBlockSize = 4;  // peer: 12 slots, vLLM-style paged
constexpr std::size_t kHalf = std::size_t{kHeads} * kDim * sizeof(float);
constexpr std::size_t kRow = 2 * kHalf;
constexpr std::uint8_t kT0 = KVTIER_T0, kT1 = KVTIER_T1, kT2 = KVTIER_T2, kT3 = KVTIER_T3, kPeer = KVTIER_TPEER;
constexpr std::uint32_t kNone = KVTIER_NO_SLOT;

using Bytes = std::vector<std::byte>;

// One token's K (every head) then V of `layer` in any cache `layout` describes.
Bytes row_of(const kernels::KvLayout& layout, std::uint32_t layer, std::uint32_t slot) {
  Bytes row(layout.row_bytes());
  for (std::uint32_t h = 0; h < layout.num_kv_heads; ++h) {
    const std::size_t at = layout.slot_offset(slot) + h * layout.head_stride;
    std::memcpy(row.data() + h * layout.head_bytes(), reinterpret_cast<const std::byte*>(layout.k_base[layer] + at),
                layout.head_bytes());
    std::memcpy(row.data() + layout.half_row_bytes() + h * layout.head_bytes(),
                reinterpret_cast<const std::byte*>(layout.v_base[layer] + at), layout.head_bytes());
  }
  return row;
}

class SequenceCacheHandoff : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::size_t own = std::size_t{kHeads} * kSlots * kDim;
    const std::size_t peer = std::size_t{kPeerBlocks} * kPeerBlockSize * kHeads * kDim;
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      k_[l].assign(own, -7.0f);  // the engine's slots before the hand-off
      v_[l].assign(own, -9.0f);
      peer_k_[l].resize(peer);
      peer_v_[l].resize(peer);
      for (std::size_t i = 0; i < peer; ++i) {  // distinct, irregular values per element
        peer_k_[l][i] = static_cast<float>((i * 37 + l * 11) % 101) * 0.05f - 2.0f;
        peer_v_[l][i] = static_cast<float>((i * 53 + l * 7) % 97) * -0.03f + 1.0f;
      }
      k_base_.push_back(reinterpret_cast<std::uintptr_t>(k_[l].data()));
      v_base_.push_back(reinterpret_cast<std::uintptr_t>(v_[l].data()));
      peer_k_base_.push_back(reinterpret_cast<std::uintptr_t>(peer_k_[l].data()));
      peer_v_base_.push_back(reinterpret_cast<std::uintptr_t>(peer_v_[l].data()));
    }
    own_ = kernels::make_hf_layout(kLayers, kHeads, kDim, kernels::KvDtype::kF32, kSlots, k_base_, v_base_);
    peer_ = kernels::make_paged_layout(kLayers, kHeads, kDim, kernels::KvDtype::kF32, kPeerBlocks, kPeerBlockSize,
                                       peer_k_base_, peer_v_base_);
    layout_.struct_size = sizeof(layout_);
    layout_.backend = KVTIER_BACKEND_CPU;
    layout_.num_layers = kLayers;
    layout_.num_kv_heads = kHeads;
    layout_.head_dim = kDim;
    layout_.dtype = KVTIER_DTYPE_F32;
    layout_.num_slots = kSlots;
    layout_.block_size = own_.block_size;
    layout_.token_stride = own_.token_stride;
    layout_.head_stride = own_.head_stride;
    layout_.block_stride = own_.block_stride;
    layout_.k_base = k_base_.data();
    layout_.v_base = v_base_.data();
    pool_bytes_.resize(std::size_t{kLayers} * kPoolSlots * kRow);
    for (std::size_t i = 0; i < pool_bytes_.size(); ++i) pool_bytes_[i] = static_cast<std::byte>(i * 31 + 5);
    pool_ = {pool_bytes_.data(), kRow, kPoolSlots * kRow, kPoolSlots, kLayers};
    int8_geometry_ = {kLayers, kHeads, kDim, kGroup, 2};
    const std::size_t bytes = shm::kPoolRowsOffset + int8_geometry_.total_bytes();
    int8_bytes_.reset(static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    std::memset(int8_bytes_.get(), 0, bytes);
    int8_.emplace(shm::Int8PoolView::trusted({int8_bytes_.get(), bytes}, int8_geometry_));
    cache_ = make_cache(int8_);
    ASSERT_TRUE(cache_->set_peer(peer_, kernels::Backend::kCpu));
  }

  std::unique_ptr<SequenceCache> make_cache(const std::optional<shm::Int8PoolView>& int8) {
    auto cache = SequenceCache::create(layout_, pool_, int8);
    EXPECT_TRUE(cache) << cache.error().message;
    return cache ? std::move(*cache) : nullptr;
  }
  Status run(SequenceCache& cache, std::vector<kvtier_plan_move> moves, std::vector<std::uint32_t> hbm = {}) {
    hbm.resize(moves.size(), kNone);
    const kvtier_plan plan{++epoch_, 1, moves.size(), moves.data()};
    return cache.execute(plan, hbm);
  }
  Status run(std::vector<kvtier_plan_move> moves, std::vector<std::uint32_t> hbm = {}) {
    return run(*cache_, std::move(moves), std::move(hbm));
  }
  // Everything a refused plan must leave alone: the engine's cache and what the cache stages.
  struct Snapshot {
    std::vector<float> k[kLayers], v[kLayers];
    std::size_t staged = 0, t2 = 0;
    bool operator==(const Snapshot&) const = default;
  };
  Snapshot snapshot() const {
    Snapshot s;
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      s.k[l] = k_[l];
      s.v[l] = v_[l];
    }
    s.staged = cache_->staged_rows();
    s.t2 = cache_->t2_rows();
    return s;
  }

  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::vector<float> k_[kLayers], v_[kLayers], peer_k_[kLayers], peer_v_[kLayers];
  std::vector<std::uintptr_t> k_base_, v_base_, peer_k_base_, peer_v_base_;
  kernels::KvLayout own_, peer_;
  kvtier_kv_layout layout_{};
  Bytes pool_bytes_;
  kernels::PoolView pool_;
  shm::Int8PoolGeometry int8_geometry_{};
  std::unique_ptr<std::byte, Free> int8_bytes_;
  std::optional<shm::Int8PoolView> int8_;
  std::unique_ptr<SequenceCache> cache_;
  std::uint64_t epoch_ = 0;
};

TEST_F(SequenceCacheHandoff, PeerToT0CopiesEveryLayerBitIdenticalIntoTheEngineSlot) {
  ASSERT_TRUE(run({{0, kPeer, kT0, 0, 5, kNone}, {1, kPeer, kT0, 0, 11, kNone}, {7, kPeer, kT0, 0, 0, kNone}},
                  {3, 15, 8}));
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    EXPECT_EQ(row_of(own_, l, 3), row_of(peer_, l, 5));
    EXPECT_EQ(row_of(own_, l, 15), row_of(peer_, l, 11));
    EXPECT_EQ(row_of(own_, l, 8), row_of(peer_, l, 0));
    EXPECT_EQ(k_[l][own_.slot_offset(4) / sizeof(float)], -7.0f);  // untouched slots keep their bytes
    EXPECT_EQ(v_[l][own_.slot_offset(4) / sizeof(float)], -9.0f);
  }
  EXPECT_EQ(cache_->staged_rows(), 0u);  // T0 rows are not staged
}

TEST_F(SequenceCacheHandoff, PeerToT1RecordsTheDaemonsRowsAndStagesThemExactly) {
  auto cache = make_cache(std::nullopt);
  ASSERT_TRUE(cache->set_peer(peer_, kernels::Backend::kCpu));
  ASSERT_TRUE(run(*cache, {{4, kPeer, kT1, 0, kNone, 6}, {9, kPeer, kT1, 0, kNone, 2}, {5, kPeer, kT0, 0, 1, kNone}},
                  {kNone, kNone, 12}));
  EXPECT_EQ(cache->staged_rows(), 2u);
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    Bytes buffer(cache->stage_bytes());
    auto staged = cache->stage(l, KVTIER_STAGE_POSITION_ORDER, buffer.data(), buffer.size());
    ASSERT_TRUE(staged) << staged.error().message;
    ASSERT_EQ(staged->rows, 2u);
    EXPECT_EQ(staged->positions[0], 4u);
    EXPECT_EQ(staged->positions[1], 9u);
    for (std::size_t i = 0; i < 2; ++i) {
      const std::byte* pool_row = pool_.row(l, i == 0 ? 6 : 2);
      EXPECT_EQ(std::memcmp(static_cast<const std::byte*>(staged->k) + i * kHalf, pool_row, kHalf), 0);
      EXPECT_EQ(std::memcmp(static_cast<const std::byte*>(staged->v) + i * kHalf, pool_row + kHalf, kHalf), 0);
    }
    EXPECT_EQ(row_of(own_, l, 12), row_of(peer_, l, 1));
  }
  // The rows are the sequence's now: a later plan moves them like any T1 row.
  ASSERT_TRUE(run(*cache, {{9, kT1, kT0, 0, 2, kNone}}, {13}));
  EXPECT_EQ(cache->staged_rows(), 1u);
}

TEST_F(SequenceCacheHandoff, PeerToT2RecordsTheInt8Slot) {
  ASSERT_TRUE(run({{6, kPeer, kT2, 0, kNone, 1}, {8, kPeer, kT2, 0, kNone, 6}, {10, kPeer, kT1, 0, kNone, 0}}));
  EXPECT_EQ(cache_->t2_rows(), 2u);
  EXPECT_EQ(cache_->staged_rows(), 3u);
  // Residency as the daemon sees it: moving on from those slots is accepted, from others not.
  EXPECT_EQ(run({{6, kT2, kT3, 0, 0, kNone}}).error().code, Errc::kProtocol);
  EXPECT_TRUE(run({{6, kT2, kT3, 0, 1, kNone}}));
}

TEST_F(SequenceCacheHandoff, BadHandoffMovesAreRefusedBeforeAnythingIsCopied) {
  ASSERT_TRUE(run({{20, kPeer, kT1, 0, kNone, 3}, {21, kPeer, kT2, 0, kNone, 2}}));
  const Snapshot before = snapshot();
  const kvtier_plan_move good{0, kPeer, kT0, 0, 5, kNone};  // valid on its own, listed first
  const std::vector<std::vector<kvtier_plan_move>> bad = {
      {good, {1, kPeer, kT0, 0, kPeerBlocks * kPeerBlockSize, kNone}},  // peer slot out of range
      {good, {1, kPeer, kT1, 0, kNone, kPoolSlots}},                    // pool slot out of range
      {good, {1, kPeer, kT1, 0, kNone, 3}},                             // pool slot already holds 20
      {good, {20, kPeer, kT1, 0, kNone, 4}},                            // position already has a host row
      {good, {1, kPeer, kT1, 0, kNone, 4}, {2, kPeer, kT1, 0, kNone, 4}},  // one pool slot twice
      {good, {1, kPeer, kT2, 0, kNone, 8}},                                // int8 slot out of range
      {good, {1, kPeer, kT2, 0, kNone, 2}},                                // int8 slot already holds 21
      {good, {0, kPeer, kT1, 0, kNone, 5}},                                // position named twice
      {good, {1, kPeer, kT3, 0, kNone, kNone}},                            // not a hand-off move
      {good, {1, kPeer, kPeer, 0, 0, kNone}},
  };
  for (std::size_t i = 0; i < bad.size(); ++i) {
    auto result = run(bad[i], {3, 4, 5});
    ASSERT_FALSE(result) << "case " << i;
    EXPECT_EQ(result.error().code, Errc::kProtocol) << "case " << i << ": " << result.error().message;
    EXPECT_TRUE(snapshot() == before) << "case " << i;
  }
  // Engine-side mistakes (two copies into one engine slot, a slot beyond the cache) are the
  // caller's: kInvalidArgument, nothing copied either.
  for (const std::vector<std::uint32_t>& hbm : {std::vector<std::uint32_t>{3, 3}, std::vector<std::uint32_t>{3, kSlots}}) {
    auto result = run({good, {1, kPeer, kT0, 0, 6, kNone}}, hbm);
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().code, Errc::kInvalidArgument) << result.error().message;
    EXPECT_TRUE(snapshot() == before);
  }
}

TEST_F(SequenceCacheHandoff, PeerMovesNeedAPeerAndT2MovesAnInt8Pool) {
  cache_->clear_peer();
  EXPECT_FALSE(cache_->has_peer());
  const Snapshot before = snapshot();
  auto result = run({{0, kPeer, kT0, 0, 5, kNone}}, {3});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, Errc::kProtocol);
  EXPECT_NE(result.error().message.find("peer"), std::string::npos) << result.error().message;
  EXPECT_TRUE(snapshot() == before);

  auto plain = make_cache(std::nullopt);
  result = run(*plain, {{0, kPeer, kT2, 0, kNone, 0}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, Errc::kProtocol);
  EXPECT_EQ(plain->staged_rows(), 0u);
}

TEST_F(SequenceCacheHandoff, APeerOfAnotherGeometryIsRefused) {
  kernels::KvLayout other = peer_;
  other.num_kv_heads = 1;
  auto result = cache_->set_peer(other, kernels::Backend::kCpu);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, Errc::kInvalidArgument);
  other = peer_;
  other.k_base.pop_back();  // not one pointer per layer
  EXPECT_FALSE(cache_->set_peer(other, kernels::Backend::kCpu));
}

}  // namespace
}  // namespace kvtier::client
