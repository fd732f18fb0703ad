// SequenceCache with an int8 (T2) pool, driven by hand-made plans over host memory: T1 -> T2
// switches reads to rows the "daemon" (this test) quantized, T2 -> T0 dequantizes into the
// engine's slot, T2 -> T3 drops, staging merges exact T1 rows with dequantized T2 rows (into a
// buffer, or straight to their positions with stage_at; attended where they live with
// attend), and every refused plan leaves cache, pool and residency untouched.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/kernels/quantize.hpp"
#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/layout.hpp"
#include "sequence_cache.hpp"

namespace kvtier::client {
namespace {

constexpr std::uint32_t kLayers = 2, kHeads = 2, kDim = 8, kSlots = 16, kPoolSlots = 8, kGroup = 4;
constexpr std::size_t kHalf = std::size_t{kHeads} * kDim * sizeof(float);
constexpr std::size_t kRow = 2 * kHalf;
constexpr std::uint8_t kT0 = KVTIER_T0, kT1 = KVTIER_T1, kT2 = KVTIER_T2, kT3 = KVTIER_T3;
constexpr std::uint32_t kNone = KVTIER_NO_SLOT;

using Bytes = std::vector<std::byte>;

class SequenceCacheT2 : public ::testing::Test {
 protected:
  void SetUp() override {
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      k_[l].resize(std::size_t{kHeads} * kSlots * kDim);
      v_[l].resize(k_[l].size());
      for (std::size_t i = 0; i < k_[l].size(); ++i) {  // distinct, irregular values per element
        k_[l][i] = static_cast<float>((i * 37 + l * 11) % 101) * 0.05f - 2.0f;
        v_[l][i] = static_cast<float>((i * 53 + l * 7) % 97) * -0.03f + 1.0f;
      }
      k_base_.push_back(reinterpret_cast<std::uintptr_t>(k_[l].data()));
      v_base_.push_back(reinterpret_cast<std::uintptr_t>(v_[l].data()));
    }
    layout_.struct_size = sizeof(layout_);  // HF [heads, slots, dim]
    layout_.backend = KVTIER_BACKEND_CPU;
    layout_.num_layers = kLayers;
    layout_.num_kv_heads = kHeads;
    layout_.head_dim = kDim;
    layout_.dtype = KVTIER_DTYPE_F32;
    layout_.num_slots = kSlots;
    layout_.block_size = kSlots;
    layout_.token_stride = kDim * sizeof(float);
    layout_.head_stride = std::size_t{kSlots} * kDim * sizeof(float);
    layout_.block_stride = std::size_t{kHeads} * kSlots * kDim * sizeof(float);
    layout_.k_base = k_base_.data();
    layout_.v_base = v_base_.data();
    pool_bytes_.assign(std::size_t{kLayers} * kPoolSlots * kRow, std::byte{0});
    pool_ = {pool_bytes_.data(), kRow, kPoolSlots * kRow, kPoolSlots, kLayers};
    int8_geometry_ = {kLayers, kHeads, kDim, kGroup, 2};
    const std::size_t bytes = shm::kPoolRowsOffset + int8_geometry_.total_bytes();
    int8_bytes_.reset(static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    std::memset(int8_bytes_.get(), 0, bytes);
    int8_.emplace(shm::Int8PoolView::trusted({int8_bytes_.get(), bytes}, int8_geometry_));
    auto cache = SequenceCache::create(layout_, pool_, int8_);
    ASSERT_TRUE(cache) << cache.error().message;
    cache_ = std::move(*cache);
  }

  // One token's row of the engine's cache (K of every head, then V), as the pool stores it.
  Bytes engine_row(std::uint32_t layer, std::uint32_t slot) const {
    Bytes row(kRow);
    for (std::uint32_t h = 0; h < kHeads; ++h) {
      const std::size_t at = (std::size_t{h} * kSlots + slot) * kDim;
      std::memcpy(row.data() + h * kDim * sizeof(float), &k_[layer][at], kDim * sizeof(float));
      std::memcpy(row.data() + kHalf + h * kDim * sizeof(float), &v_[layer][at], kDim * sizeof(float));
    }
    return row;
  }
  Bytes pool_row(std::uint32_t layer, std::uint32_t slot) const {
    return Bytes(pool_.row(layer, slot), pool_.row(layer, slot) + kRow);
  }
  kernels::Int8Geometry kernel_geometry() const { return {kHeads, kDim, kernels::KvDtype::kF32, kGroup}; }
  // What the daemon does before a T1 -> T2 plan: quantizes the T1 rows of int8 block `block`
  // (t1_slots[i] becomes row i of the block) in every layer.
  void daemon_quantize(std::uint32_t block, const std::vector<std::uint32_t>& t1_slots) {
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      std::vector<const std::byte*> rows;
      for (std::uint32_t s : t1_slots) rows.push_back(pool_.row(l, s));
      ASSERT_TRUE(kernels::quantize_block(kernel_geometry(), rows, int8_->block(l, block)));
    }
  }
  Bytes dequantized(std::uint32_t layer, std::uint32_t int8_slot) {
    Bytes row(kRow);
    std::byte* out = row.data();
    const std::uint32_t which = int8_slot % kGroup;
    EXPECT_TRUE(kernels::dequantize_block(kernel_geometry(), int8_->block(layer, int8_slot / kGroup), {&which, 1},
                                          {&out, 1}));
    return row;
  }
  Status run(std::vector<kvtier_plan_move> moves, std::vector<std::uint32_t> hbm) {
    hbm.resize(moves.size(), kNone);
    const kvtier_plan plan{++epoch_, 1, moves.size(), moves.data()};
    return cache_->execute(plan, hbm);
  }
  // Offloads engine slots 0..3 (positions 100..103) to pool slots 0..3, then moves positions
  // 101 and 103 on to int8 slots 0 and 1.
  void demote_two() {
    ASSERT_TRUE(run({{100, kT0, kT1, 0, kNone, 0},
                     {101, kT0, kT1, 0, kNone, 1},
                     {102, kT0, kT1, 0, kNone, 2},
                     {103, kT0, kT1, 0, kNone, 3}},
                    {0, 1, 2, 3}));
    daemon_quantize(0, {1, 3});
    ASSERT_TRUE(run({{103, kT1, kT2, 0, 3, 1}, {101, kT1, kT2, 0, 1, 0}}, {}));
  }
  struct Staged {
    kvtier_staged_layer layer;
    Bytes buffer;
    Bytes row(std::size_t i) const {  // K and V of staged row i, joined as a pool row
      Bytes out(kRow);
      std::memcpy(out.data(), static_cast<const std::byte*>(layer.k) + i * kHalf, kHalf);
      std::memcpy(out.data() + kHalf, static_cast<const std::byte*>(layer.v) + i * kHalf, kHalf);
      return out;
    }
  };
  Staged stage(std::uint32_t layer, kvtier_staging_order order) {
    Staged s{{}, Bytes(cache_->stage_bytes())};
    auto staged = cache_->stage(layer, order, s.buffer.data(), s.buffer.size());
    EXPECT_TRUE(staged) << staged.error().message;
    if (staged) s.layer = *staged;
    return s;
  }

  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::vector<float> k_[kLayers], v_[kLayers];
  std::vector<std::uintptr_t> k_base_, v_base_;
  kvtier_kv_layout layout_{};
  Bytes pool_bytes_;
  kernels::PoolView pool_;
  shm::Int8PoolGeometry int8_geometry_{};
  std::unique_ptr<std::byte, Free> int8_bytes_;
  std::optional<shm::Int8PoolView> int8_;
  std::unique_ptr<SequenceCache> cache_;
  std::uint64_t epoch_ = 0;
};

TEST_F(SequenceCacheT2, StagesT1RowsExactAndT2RowsDequantizedInPositionOrder) {
  demote_two();
  EXPECT_EQ(cache_->staged_rows(), 4u);
  EXPECT_EQ(cache_->t2_rows(), 2u);
  EXPECT_EQ(cache_->stage_bytes(), 4 * kRow);
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    const Staged s = stage(l, KVTIER_STAGE_POSITION_ORDER);
    ASSERT_EQ(s.layer.rows, 4u);
    EXPECT_EQ(std::vector<std::uint32_t>(s.layer.positions, s.layer.positions + 4),
              (std::vector<std::uint32_t>{100, 101, 102, 103}));
    EXPECT_EQ(s.row(0), engine_row(l, 0));
    EXPECT_EQ(s.row(1), dequantized(l, 0));
    EXPECT_EQ(s.row(2), engine_row(l, 2));
    EXPECT_EQ(s.row(3), dequantized(l, 1));
    EXPECT_NE(s.row(1), engine_row(l, 1));  // lossy: the int8 copy, not the original
  }
}

TEST_F(SequenceCacheT2, CompactOrderStagesT1RowsThenT2Rows) {
  demote_two();
  const Staged s = stage(1, KVTIER_STAGE_COMPACT);
  ASSERT_EQ(s.layer.rows, 4u);
  EXPECT_EQ(std::vector<std::uint32_t>(s.layer.positions, s.layer.positions + 4),
            (std::vector<std::uint32_t>{100, 102, 101, 103}));
  EXPECT_EQ(s.row(1), engine_row(1, 2));
  EXPECT_EQ(s.row(2), dequantized(1, 0));
}

TEST_F(SequenceCacheT2, T2ToT0DequantizesEveryLayerIntoTheEngineSlot) {
  demote_two();
  ASSERT_TRUE(run({{101, kT2, kT0, 0, 0, kNone}}, {9}));
  for (std::uint32_t l = 0; l < kLayers; ++l) EXPECT_EQ(engine_row(l, 9), dequantized(l, 0));
  EXPECT_EQ(cache_->t2_rows(), 1u);
  EXPECT_EQ(cache_->staged_rows(), 3u);
  const Staged s = stage(0, KVTIER_STAGE_POSITION_ORDER);
  EXPECT_EQ(std::vector<std::uint32_t>(s.layer.positions, s.layer.positions + 3),
            (std::vector<std::uint32_t>{100, 102, 103}));
}

TEST_F(SequenceCacheT2, T2ToT3DropsTheRow) {
  demote_two();
  ASSERT_TRUE(run({{103, kT2, kT3, 0, 1, kNone}}, {}));
  EXPECT_EQ(cache_->t2_rows(), 1u);
  EXPECT_EQ(cache_->staged_rows(), 3u);
  // Gone for good: a second move out of that slot names a token the client no longer holds.
  EXPECT_EQ(run({{103, kT2, kT0, 0, 1, kNone}}, {9}).error().code, Errc::kProtocol);
}

TEST_F(SequenceCacheT2, MovesKvtierdNeverMakesAreProtocolErrors) {
  demote_two();
  EXPECT_EQ(run({{104, kT0, kT2, 0, kNone, 2}}, {4}).error().code, Errc::kProtocol);
  EXPECT_EQ(run({{101, kT2, kT1, 0, 0, 5}}, {}).error().code, Errc::kProtocol);
  EXPECT_EQ(run({{101, kT3, kT0, 0, kNone, kNone}}, {5}).error().code, Errc::kProtocol);
  // Out of a slot that does not hold the token, or into one the int8 pool lacks.
  EXPECT_EQ(run({{101, kT2, kT0, 0, 1, kNone}}, {5}).error().code, Errc::kProtocol);
  EXPECT_EQ(run({{100, kT1, kT2, 0, 0, 8}}, {}).error().code, Errc::kProtocol);
  EXPECT_EQ(cache_->t2_rows(), 2u);
  EXPECT_EQ(cache_->staged_rows(), 4u);
}

TEST_F(SequenceCacheT2, ARefusedPlanCopiesNothing) {
  demote_two();
  const Bytes pool_before = pool_bytes_;
  const Bytes slot5 = engine_row(0, 5);
  // A valid offload and T1 restore, then a T2 restore into an engine slot that does not exist.
  const Status refused = run({{104, kT0, kT1, 0, kNone, 4},
                              {100, kT1, kT0, 0, 0, kNone},
                              {101, kT2, kT0, 0, 0, kNone}},
                             {4, 5, kSlots});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(pool_bytes_, pool_before);
  EXPECT_EQ(engine_row(0, 5), slot5);
  EXPECT_EQ(cache_->staged_rows(), 4u);
  EXPECT_EQ(cache_->t2_rows(), 2u);
}

TEST_F(SequenceCacheT2, T2MovesNeedAnInt8Pool) {
  auto plain = SequenceCache::create(layout_, pool_);
  ASSERT_TRUE(plain);
  std::vector<kvtier_plan_move> moves{{100, kT0, kT1, 0, kNone, 0}};
  std::vector<std::uint32_t> hbm{0};
  ASSERT_TRUE((*plain)->execute({1, 1, 1, moves.data()}, hbm));
  moves = {{100, kT1, kT2, 0, 0, 0}};
  EXPECT_EQ((*plain)->execute({2, 1, 1, moves.data()}, hbm).error().code, Errc::kProtocol);
}

TEST_F(SequenceCacheT2, AnInt8PoolOfAnotherModelIsRefused) {
  layout_.num_layers = 1;
  auto cache = SequenceCache::create(layout_, {pool_bytes_.data(), kRow, kPoolSlots * kRow, kPoolSlots, 1}, int8_);
  ASSERT_FALSE(cache);
  EXPECT_EQ(cache.error().code, Errc::kInvalidArgument);
}

TEST_F(SequenceCacheT2, StagingChecksTheBufferWithT2Rows) {
  demote_two();
  Bytes small(3 * kRow);
  EXPECT_EQ(cache_->stage(0, KVTIER_STAGE_POSITION_ORDER, small.data(), small.size()).error().code,
            Errc::kInvalidArgument);
  Bytes enough(4 * kRow);
  EXPECT_EQ(cache_->stage(kLayers, KVTIER_STAGE_POSITION_ORDER, enough.data(), enough.size()).error().code,
            Errc::kInvalidArgument);
}

// stage_at: an engine's [heads, rows, dim] layer view (row = position + offset) gets each host
// row, T1 exact and T2 dequantized, where stage() would have listed it; nothing else is written.
TEST_F(SequenceCacheT2, StageAtPutsEachHostRowAtItsPositionAndNothingElse) {
  demote_two();
  constexpr std::size_t kRows = 110, kOffset = 3, kHead = kDim * sizeof(float);
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    Bytes k(kHeads * kRows * kHead), v(k.size());
    const kernels::PositionTarget target{reinterpret_cast<std::uintptr_t>(k.data()),
                                         reinterpret_cast<std::uintptr_t>(v.data()), kRows, kHead, kRows * kHead,
                                         kOffset};
    ASSERT_TRUE(cache_->stage_at(l, target));
    const Staged want = stage(l, KVTIER_STAGE_POSITION_ORDER);
    Bytes expect_k(k.size()), expect_v(v.size());
    for (std::size_t i = 0; i < want.layer.rows; ++i) {
      const Bytes row = want.row(i);
      const std::size_t at = (want.layer.positions[i] + kOffset) * kHead;
      for (std::size_t h = 0; h < kHeads; ++h) {
        std::memcpy(expect_k.data() + h * kRows * kHead + at, row.data() + h * kHead, kHead);
        std::memcpy(expect_v.data() + h * kRows * kHead + at, row.data() + kHalf + h * kHead, kHead);
      }
    }
    EXPECT_EQ(k, expect_k);
    EXPECT_EQ(v, expect_v);
  }
}

TEST_F(SequenceCacheT2, StageAtRefusesAPositionOutsideTheTargetAndWritesNothing) {
  demote_two();
  constexpr std::size_t kHead = kDim * sizeof(float);
  Bytes k(kHeads * 103 * kHead), v(k.size());  // position 103 has no row
  const kernels::PositionTarget target{reinterpret_cast<std::uintptr_t>(k.data()),
                                       reinterpret_cast<std::uintptr_t>(v.data()), 103, kHead, 103 * kHead, 0};
  const Status done = cache_->stage_at(0, target);
  ASSERT_FALSE(done);
  EXPECT_EQ(done.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(k, Bytes(k.size()));
  EXPECT_EQ(v, Bytes(v.size()));
  EXPECT_EQ(cache_->stage_at(kLayers, {}).error().code, Errc::kInvalidArgument);
}

TEST_F(SequenceCacheT2, StageAtIsRefusedWhileALayerIsPrefetched) {
  demote_two();
  Bytes buffer(cache_->stage_bytes()), k(kHeads * 104 * kDim * sizeof(float)), v(k.size());
  const kernels::PositionTarget target{reinterpret_cast<std::uintptr_t>(k.data()),
                                       reinterpret_cast<std::uintptr_t>(v.data()), 104, kDim * sizeof(float),
                                       104 * kDim * sizeof(float), 0};
  ASSERT_TRUE(cache_->prefetch(0, KVTIER_STAGE_COMPACT, buffer.data(), buffer.size()));
  EXPECT_EQ(cache_->stage_at(1, target).error().code, Errc::kBadState);
  ASSERT_TRUE(cache_->wait(0));
  EXPECT_TRUE(cache_->stage_at(1, target));
}

// attend reads the cache's T0 slots it is given, then the host rows (T2 dequantized) in
// ascending position order: the same bits as attend_rows over the rows a position-order stage
// returns.
TEST_F(SequenceCacheT2, AttendReadsTheGivenCacheSlotsThenTheHostRowsInPositionOrder) {
  demote_two();
  constexpr std::uint32_t kQHeads = 4;
  std::vector<float> q(kQHeads * kDim);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>((i * 29) % 13) * 0.2f - 1.0f;
  const kernels::HostQuery query{q.data(), kQHeads, kDim, 0.35f};
  const auto layout = kernels::make_hf_layout(kLayers, kHeads, kDim, kernels::KvDtype::kF32, kSlots, k_base_, v_base_);
  const std::vector<std::uint32_t> t0{7, 5};
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    const Staged want = stage(l, KVTIER_STAGE_POSITION_ORDER);
    ASSERT_EQ(want.layer.rows, 4u);
    std::vector<Bytes> host;
    std::vector<kernels::AttendRow> rows;
    for (std::uint32_t s : t0) {
      const std::size_t at = layout.slot_offset(s);
      rows.push_back({reinterpret_cast<const std::byte*>(k_base_[l]) + at,
                      reinterpret_cast<const std::byte*>(v_base_[l]) + at, layout.head_stride});
    }
    for (std::size_t i = 0; i < want.layer.rows; ++i) host.push_back(want.row(i));
    for (const Bytes& row : host) rows.push_back({row.data(), row.data() + kHalf, kDim * sizeof(float)});
    std::vector<float> out(kQHeads * kDim), lse(kQHeads), probs(kQHeads * 6), scores(6);
    std::vector<float> want_out(out.size()), want_lse(lse.size()), want_probs(probs.size()), want_scores(6);
    kernels::attend_rows(layout, query, rows,
                         {want_out.data(), want_lse.data(), want_probs.data(), 6, want_scores.data(), 6});
    ASSERT_TRUE(cache_->attend(l, t0, t0.size(), query, {out.data(), lse.data(), probs.data(), 6, scores.data(), 6}));
    EXPECT_EQ(out, want_out);
    EXPECT_EQ(lse, want_lse);
    EXPECT_EQ(probs, want_probs);
    EXPECT_EQ(scores, want_scores);
  }
  Bytes buffer(cache_->stage_bytes());
  std::vector<float> out(kQHeads * kDim), lse(kQHeads);
  ASSERT_TRUE(cache_->prefetch(0, KVTIER_STAGE_COMPACT, buffer.data(), buffer.size()));
  EXPECT_EQ(cache_->attend(1, {}, 0, query, {out.data(), lse.data()}).error().code, Errc::kBadState);
  ASSERT_TRUE(cache_->wait(0));
  EXPECT_EQ(cache_->attend(kLayers, {}, 0, query, {out.data(), lse.data()}).error().code, Errc::kInvalidArgument);
  const std::vector<std::uint32_t> outside{kSlots};
  EXPECT_EQ(cache_->attend(0, outside, outside.size(), query, {out.data(), lse.data()}).error().code, Errc::kInvalidArgument);
}

// Double buffering: layer 1 prefetched while layer 0 is still in flight; each wait returns what
// a one-shot stage returns, and the bookkeeping refuses what would corrupt a buffer in use.
TEST_F(SequenceCacheT2, PrefetchAndWaitKeepTwoLayersInFlight) {
  demote_two();
  const Staged want0 = stage(0, KVTIER_STAGE_POSITION_ORDER), want1 = stage(1, KVTIER_STAGE_POSITION_ORDER);
  Bytes a(cache_->stage_bytes()), b(cache_->stage_bytes()), c(cache_->stage_bytes());
  ASSERT_TRUE(cache_->prefetch(0, KVTIER_STAGE_POSITION_ORDER, a.data(), a.size()));
  EXPECT_EQ(cache_->prefetch(0, KVTIER_STAGE_POSITION_ORDER, c.data(), c.size()).error().code, Errc::kBadState);
  ASSERT_TRUE(cache_->prefetch(1, KVTIER_STAGE_POSITION_ORDER, b.data(), b.size()));
  const auto third = cache_->prefetch(2, KVTIER_STAGE_POSITION_ORDER, c.data(), c.size());
  ASSERT_FALSE(third);
  EXPECT_EQ(third.error().code, Errc::kBadState);
  // No plan while a buffer is being filled.
  EXPECT_EQ(run({{102, kT1, kT0, 0, 2, kNone}}, {9}).error().code, Errc::kBadState);

  auto got1 = cache_->wait(1);
  ASSERT_TRUE(got1) << got1.error().message;
  EXPECT_EQ(got1->rows, want1.layer.rows);
  EXPECT_EQ(Bytes(b.begin(), b.end()), want1.buffer);
  EXPECT_EQ(cache_->wait(1).error().code, Errc::kBadState);  // already waited for
  auto got0 = cache_->wait(0);
  ASSERT_TRUE(got0) << got0.error().message;
  EXPECT_EQ(Bytes(a.begin(), a.end()), want0.buffer);
  for (std::size_t i = 0; i < got0->rows; ++i) EXPECT_EQ(got0->positions[i], want0.layer.positions[i]);
  // Both slots free again: a plan runs.
  EXPECT_TRUE(run({{102, kT1, kT0, 0, 2, kNone}}, {9}));
}

// An engine that grows its cache copies the T0 rows over and attaches again: the host rows stay
// the sequence's, and every later copy reads and writes the new memory.
TEST_F(SequenceCacheT2, AttachingAgainMovesTheCacheAndKeepsItsHostRows) {
  demote_two();
  const Staged before = stage(0, KVTIER_STAGE_POSITION_ORDER);
  constexpr std::uint32_t kGrown = 2 * kSlots;
  std::vector<float> k[kLayers], v[kLayers];
  std::vector<std::uintptr_t> k_base, v_base;
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    k[l].assign(std::size_t{kHeads} * kGrown * kDim, 0.0f);
    v[l].assign(k[l].size(), 0.0f);
    k_base.push_back(reinterpret_cast<std::uintptr_t>(k[l].data()));
    v_base.push_back(reinterpret_cast<std::uintptr_t>(v[l].data()));
  }
  kvtier_kv_layout grown = layout_;
  grown.num_slots = grown.block_size = kGrown;
  grown.head_stride = std::size_t{kGrown} * kDim * sizeof(float);
  grown.block_stride = std::size_t{kHeads} * grown.head_stride;
  grown.k_base = k_base.data();
  grown.v_base = v_base.data();
  ASSERT_TRUE(cache_->relocate(grown));

  EXPECT_EQ(cache_->staged_rows(), 4u);
  EXPECT_EQ(stage(0, KVTIER_STAGE_POSITION_ORDER).buffer, before.buffer);
  // T1 -> T0 and T2 -> T0 into slots the old cache did not have.
  ASSERT_TRUE(run({{100, kT1, kT0, 0, 0, kNone}, {101, kT2, kT0, 0, 0, kNone}}, {kSlots + 3, kSlots + 5}));
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    Bytes row(kRow), want = engine_row(l, 0);
    for (std::uint32_t h = 0; h < kHeads; ++h) {
      const std::size_t at = (std::size_t{h} * kGrown + kSlots + 3) * kDim;
      std::memcpy(row.data() + h * kDim * sizeof(float), &k[l][at], kDim * sizeof(float));
      std::memcpy(row.data() + kHalf + h * kDim * sizeof(float), &v[l][at], kDim * sizeof(float));
    }
    EXPECT_EQ(row, want);
  }
  EXPECT_EQ(cache_->staged_rows(), 2u);
}

TEST_F(SequenceCacheT2, AMoveKeepsTheGeometryAndWaitsForStaging) {
  demote_two();
  kvtier_kv_layout other = layout_;
  other.head_dim = kDim / 2;
  other.token_stride = other.head_dim * sizeof(float);
  EXPECT_EQ(cache_->relocate(other).error().code, Errc::kInvalidArgument);
  Bytes a(cache_->stage_bytes());
  ASSERT_TRUE(cache_->prefetch(0, KVTIER_STAGE_POSITION_ORDER, a.data(), a.size()));
  EXPECT_EQ(cache_->relocate(layout_).error().code, Errc::kBadState);
  ASSERT_TRUE(cache_->wait(0));
  EXPECT_TRUE(cache_->relocate(layout_));
  EXPECT_EQ(stage(1, KVTIER_STAGE_POSITION_ORDER).layer.rows, 4u);
}

}  // namespace
}  // namespace kvtier::client
