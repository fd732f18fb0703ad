// attend_rows and CopyExecutor::attend: one decode query over rows in host memory against a
// float64 reference in every dtype and over several chunks, rows with different head strides
// (an HF cache's and a pool's), the log-sum-exp merge of two parts, no rows, the scores, the
// request checks, the same bits from every instruction set of the block loops, and the executor
// reading T0 slots of the engine's cache and pool rows, one token or a block of tokens per slot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "host_attention_rows.hpp"
#include "kvtier/kernels/executor.hpp"
#include "kvtier/kernels/executor_factory.hpp"
#include "kvtier/kernels/host_attention.hpp"
#include "kvtier/kernels/quantize.hpp"

namespace kvtier::kernels {
namespace {

constexpr std::uint32_t kLayers = 2, kKvHeads = 2, kQHeads = 6, kDim = 20;  // GQA groups of 3; dim not a multiple of 8
constexpr std::size_t kHalf = std::size_t{kKvHeads} * kDim;
constexpr float kInf = std::numeric_limits<float>::infinity();

KvLayout layout(KvDtype dtype) {
  std::vector<std::uintptr_t> bases(kLayers, 64);  // never dereferenced here
  return make_hf_layout(kLayers, kKvHeads, kDim, dtype, 8, bases, bases);
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// Rows as float vectors, K of every KV head then V.
std::vector<std::vector<float>> random_rows(std::size_t n, std::uint32_t seed) {
  std::vector<std::vector<float>> rows(n);
  for (std::size_t i = 0; i < n; ++i) rows[i] = random_floats(2 * kHalf, seed + static_cast<std::uint32_t>(i), 1.0f);
  return rows;
}

// float64 attention over rows: out, lse and probs [q_heads, rows].
struct Reference {
  std::vector<double> out, lse, probs;
};

Reference reference(const std::vector<float>& q, const std::vector<std::vector<float>>& rows, double scale) {
  Reference r{std::vector<double>(kQHeads * kDim, 0.0), std::vector<double>(kQHeads), {}};
  for (std::uint32_t h = 0; h < kQHeads; ++h) {
    const std::uint32_t kv = h / (kQHeads / kKvHeads);
    std::vector<double> s(rows.size());
    double max = -std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      double dot = 0;
      for (std::uint32_t d = 0; d < kDim; ++d) dot += double{q[h * kDim + d]} * rows[i][kv * kDim + d];
      s[i] = scale * dot;
      max = std::max(max, s[i]);
    }
    double sum = 0;
    for (double x : s) sum += std::exp(x - max);
    r.lse[h] = max + std::log(sum);
    for (double x : s) r.probs.push_back(std::exp(x - r.lse[h]));
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const double p = std::exp(s[i] - r.lse[h]);
      for (std::uint32_t d = 0; d < kDim; ++d) r.out[h * kDim + d] += p * rows[i][kHalf + kv * kDim + d];
    }
  }
  return r;
}

struct Result {
  std::vector<float> out = std::vector<float>(kQHeads * kDim, -1.0f), lse = std::vector<float>(kQHeads, -1.0f);
  std::vector<float> probs, scores;
  AttendOutput view(std::size_t rows) {
    probs.assign(kQHeads * rows, 0.0f);
    scores.assign(rows, 1.0f);  // added to
    return AttendOutput{out.data(), lse.data(), probs.data(), rows, scores.data(), rows};
  }
};

// Rows stored in `dtype` as pool rows; `as_f32` gets what the kernel reads (dtype-rounded).
std::vector<std::byte> encode(KvDtype dtype, const std::vector<std::vector<float>>& rows,
                              std::vector<std::vector<float>>& as_f32) {
  const std::size_t row_bytes = 2 * kHalf * dtype_bytes(dtype);
  std::vector<std::byte> bytes(rows.size() * row_bytes);
  as_f32.assign(rows.size(), std::vector<float>(2 * kHalf));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    from_f32(dtype, rows[i].data(), bytes.data() + i * row_bytes, 2 * kHalf);
    to_f32(dtype, bytes.data() + i * row_bytes, as_f32[i].data(), 2 * kHalf);
  }
  return bytes;
}

std::vector<AttendRow> pool_rows(KvDtype dtype, const std::vector<std::byte>& bytes, std::size_t n) {
  const std::size_t head = kDim * dtype_bytes(dtype), row_bytes = 2 * kHalf * dtype_bytes(dtype);
  std::vector<AttendRow> rows;
  for (std::size_t i = 0; i < n; ++i) rows.push_back({&bytes[i * row_bytes], &bytes[i * row_bytes] + kKvHeads * head, head});
  return rows;
}

Result attend(KvDtype dtype, const std::vector<float>& q, const std::vector<AttendRow>& rows, float scale) {
  Result r;
  const AttendOutput out = r.view(rows.size());
  const KvLayout l = layout(dtype);
  const HostQuery query{q.data(), kQHeads, kDim, scale};
  EXPECT_TRUE(validate_host_attention(l, query, out, rows.size()));
  attend_rows(l, query, rows, out);
  return r;
}

void expect_matches(const Result& got, const Reference& want, double tolerance) {
  for (std::size_t i = 0; i < got.out.size(); ++i) EXPECT_NEAR(got.out[i], want.out[i], tolerance) << i;
  for (std::size_t h = 0; h < kQHeads; ++h) EXPECT_NEAR(got.lse[h], want.lse[h], tolerance) << h;
  const std::size_t rows = got.scores.size();
  for (std::size_t i = 0; i < got.probs.size(); ++i) EXPECT_NEAR(got.probs[i], want.probs[i], 1e-6) << i;
  for (std::size_t i = 0; i < rows; ++i) {
    double sum = 1.0;  // what scores held
    for (std::uint32_t h = 0; h < kQHeads; ++h) sum += want.probs[h * rows + i];
    EXPECT_NEAR(got.scores[i], sum, 1e-5) << i;
  }
}

void expect_same_bits(const Result& got, const Result& want) {
  EXPECT_EQ(got.out, want.out);
  EXPECT_EQ(got.lse, want.lse);
  EXPECT_EQ(got.probs, want.probs);
  EXPECT_EQ(got.scores, want.scores);
}

TEST(AttendRows, MatchesAFloat64ReferenceInEveryDtypeOverSeveralChunks) {
  const float scale = 1.0f / std::sqrt(float{kDim});
  const std::vector<float> q = random_floats(kQHeads * kDim, 7, 2.0f);  // peaked softmax: a max that moves
  const std::size_t n = 2 * kAttendChunkRows + 45;                      // three chunks, the last one short
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    std::vector<std::vector<float>> read;
    const auto bytes = encode(dtype, random_rows(n, 100), read);
    expect_matches(attend(dtype, q, pool_rows(dtype, bytes, n), scale), reference(q, read, scale), 1e-5);
  }
}

// Rows of an HF cache ([kv_heads, slots, head_dim]: heads a whole cache apart) and of a pool in one
// call, as the executor passes an engine's T0 rows and its host rows.
TEST(AttendRows, ReadsEachRowWithItsOwnHeadStride) {
  constexpr std::size_t kSlots = 12;
  const auto rows = random_rows(kSlots + 5, 300);
  std::vector<float> k(kKvHeads * kSlots * kDim), v(k.size());
  for (std::size_t s = 0; s < kSlots; ++s) {
    for (std::uint32_t h = 0; h < kKvHeads; ++h) {
      std::memcpy(&k[(h * kSlots + s) * kDim], &rows[s][h * kDim], kDim * sizeof(float));
      std::memcpy(&v[(h * kSlots + s) * kDim], &rows[s][kHalf + h * kDim], kDim * sizeof(float));
    }
  }
  std::vector<std::vector<float>> read;
  const std::vector<std::vector<float>> pooled(rows.begin() + kSlots, rows.end());
  const auto bytes = encode(KvDtype::kF32, pooled, read);
  std::vector<AttendRow> all;
  for (std::size_t s = 0; s < kSlots; ++s) {
    all.push_back({reinterpret_cast<const std::byte*>(&k[s * kDim]), reinterpret_cast<const std::byte*>(&v[s * kDim]),
                   kSlots * kDim * sizeof(float)});
  }
  for (const AttendRow& r : pool_rows(KvDtype::kF32, bytes, pooled.size())) all.push_back(r);
  const std::vector<float> q = random_floats(kQHeads * kDim, 8, 1.0f);
  expect_matches(attend(KvDtype::kF32, q, all, 0.4f), reference(q, rows, 0.4f), 1e-5);
}

TEST(AttendRows, TwoPartsMergedByLogSumExpEqualAttentionOverAllRows) {
  const float scale = 0.3f;
  const std::vector<float> q = random_floats(kQHeads * kDim, 11, 1.0f);
  std::vector<std::vector<float>> read;
  const auto bytes = encode(KvDtype::kF32, random_rows(90, 500), read);
  const auto rows = pool_rows(KvDtype::kF32, bytes, 90);
  const std::size_t split = 37;
  const Result a = attend(KvDtype::kF32, q, {rows.begin(), rows.begin() + split}, scale);
  const Result b = attend(KvDtype::kF32, q, {rows.begin() + split, rows.end()}, scale);
  const Reference all = reference(q, read, scale);
  for (std::uint32_t h = 0; h < kQHeads; ++h) {
    const double lse = std::log(std::exp(double{a.lse[h]}) + std::exp(double{b.lse[h]}));
    EXPECT_NEAR(lse, all.lse[h], 1e-5);
    for (std::uint32_t d = 0; d < kDim; ++d) {
      const double merged = std::exp(a.lse[h] - lse) * a.out[h * kDim + d] + std::exp(b.lse[h] - lse) * b.out[h * kDim + d];
      EXPECT_NEAR(merged, all.out[h * kDim + d], 1e-5);
    }
  }
}

TEST(AttendRows, NoRowsGiveMinusInfinityAndZeros) {
  const std::vector<float> q = random_floats(kQHeads * kDim, 3, 1.0f);
  const Result r = attend(KvDtype::kF32, q, {}, 0.5f);
  for (float lse : r.lse) EXPECT_EQ(lse, -kInf);
  for (float x : r.out) EXPECT_EQ(x, 0.0f);
}

TEST(AttendRows, RequestChecksRefuseABadQueryOrStride) {
  const std::vector<float> q(kQHeads * kDim);
  Result r;
  const KvLayout l = layout(KvDtype::kF32);
  const AttendOutput out = r.view(4);
  const auto code = [&](HostQuery query, AttendOutput o, std::size_t rows) {
    const Status s = validate_host_attention(l, query, o, rows);
    return s ? Errc::kOk : s.error().code;
  };
  EXPECT_EQ(code({q.data(), kQHeads, kDim, 0.5f}, out, 4), Errc::kOk);
  EXPECT_EQ(code({nullptr, kQHeads, kDim, 0.5f}, out, 4), Errc::kInvalidArgument);
  EXPECT_EQ(code({q.data(), 5, kDim, 0.5f}, out, 4), Errc::kInvalidArgument);  // not a multiple of 2 KV heads
  EXPECT_EQ(code({q.data(), 0, kDim, 0.5f}, out, 4), Errc::kInvalidArgument);
  EXPECT_EQ(code({q.data(), kQHeads, kDim + 1, 0.5f}, out, 4), Errc::kInvalidArgument);  // not the layout's
  EXPECT_EQ(code({q.data(), kQHeads, kDim, kInf}, out, 4), Errc::kInvalidArgument);
  EXPECT_EQ(code({q.data(), kQHeads, kDim, 0.5f}, out, 5), Errc::kInvalidArgument);  // probs_stride 4 < 5 rows
  EXPECT_EQ(code({q.data(), kQHeads, kDim, 0.5f}, AttendOutput{out.out, out.lse, nullptr, 0, out.scores, 4}, 3),
            Errc::kInvalidArgument);  // 4 scores for 3 rows
  EXPECT_EQ(code({q.data(), kQHeads, kDim, 0.5f}, AttendOutput{out.out, nullptr}, 4), Errc::kInvalidArgument);
  EXPECT_EQ(code({q.data(), kQHeads, kDim, 0.5f}, AttendOutput{out.out, out.lse}, 9), Errc::kOk);  // no probs
}

// The AVX2 loops (where this CPU has them) give the baseline loops' bits, with token-major keys
// and with full blocks of dim-major keys.
class EveryInstructionSet : public ::testing::TestWithParam<bool> {};

TEST_P(EveryInstructionSet, GivesTheSameBits) {
  const bool dim_major = GetParam();
  const detail::AttentionLoops* avx2 = detail::avx2_attention_loops();
  if (avx2 == nullptr) GTEST_SKIP() << "this CPU (or build) has no AVX2 loops to compare";
  const std::vector<float> q = random_floats(kQHeads * kDim, 13, 2.0f);
  const auto rows = random_rows(203, 900);  // a last block of 3 rows
  // Each full block as vLLM's CPU cache holds it, one head stride for K and V (kDim * 8): keys
  // dim-major [kv_heads, dim, 8], values [kv_heads, 8, dim].
  std::vector<std::vector<float>> keys(rows.size() / 8, std::vector<float>(kHalf * 8));
  std::vector<std::vector<float>> values(keys.size(), std::vector<float>(kHalf * 8));
  for (std::size_t b = 0; b < keys.size(); ++b) {
    for (std::size_t r = 0; r < 8; ++r) {
      for (std::size_t head = 0; head < kKvHeads; ++head) {
        for (std::size_t e = 0; e < kDim; ++e) {
          keys[b][(head * kDim + e) * 8 + r] = rows[b * 8 + r][head * kDim + e];
          values[b][(head * 8 + r) * kDim + e] = rows[b * 8 + r][kHalf + head * kDim + e];
        }
      }
    }
  }
  std::vector<float> state[2][3];  // per table: max, sum, acc
  std::vector<float> logits[2];
  for (int which = 0; which < 2; ++which) {
    auto& [max, sum, acc] = state[which];
    max.assign(kQHeads, -kInf);
    sum.assign(kQHeads, 0.0f);
    acc.assign(kQHeads * kDim, 0.0f);
    logits[which].assign(kQHeads * rows.size(), 0.0f);
    const detail::AttentionLoops& loops = which == 0 ? detail::baseline_attention_loops() : *avx2;
    detail::AttentionState s{q.data(), 0.125f, kQHeads, kQHeads / kKvHeads, kDim, max.data(), sum.data(), acc.data(),
                             logits[which].data(), rows.size(), 0, nullptr, 0, kKvHeads, kDim * sizeof(float)};
    for (std::size_t i = 0; i < rows.size(); i += 8) {
      detail::FloatRows block{};
      const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(8, rows.size() - i));
      const bool transpose = dim_major && n == 8;
      if (transpose) block.dim_stride = 8;
      for (std::uint32_t r = 0; r < n; ++r) {
        block.k[r] = transpose ? keys[i / 8].data() : rows[i + r].data();
        block.v[r] = transpose ? values[i / 8].data() + r * kDim : rows[i + r].data() + kHalf;
        block.stride[r] = transpose ? kDim * 8 : kDim;
      }
      loops.add_block(s, block, n);
    }
    loops.to_probs(logits[which].data(), logits[which].size() - 3, 2.5f);  // 1,215 values: a tail of 7
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(state[0][i], state[1][i]) << i;
  EXPECT_EQ(logits[0], logits[1]);
}

INSTANTIATE_TEST_SUITE_P(AttendRows, EveryInstructionSet, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? std::string("DimMajorKeys") : std::string("TokenMajorKeys");
                         });

// The probabilities' e^x (the block loops use the same polynomial) within one ulp of float64 exp
// over [−87, 0], and 0 below.
TEST(AttendRows, ProbabilitiesAreWithinOneUlpOfExp) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 0.0f; v += 0.000731f) x.push_back(v);
  x.push_back(0.0f);
  x.push_back(-88.0f);
  x.push_back(-kInf);
  std::vector<float> p = x;
  detail::default_attention_loops().to_probs(p.data(), p.size(), 0.0f);
  double worst = 0;
  for (std::size_t i = 0; i + 2 < x.size(); ++i) {
    const double want = std::exp(double{x[i]});
    const auto rounded = static_cast<float>(want);
    worst = std::max(worst, std::abs(p[i] - want) / (std::nextafter(rounded, kInf) - rounded));
  }
  EXPECT_LE(worst, 1.0);
  EXPECT_EQ(p[p.size() - 2], 0.0f);
  EXPECT_EQ(p.back(), 0.0f);
}

// A float32 pool and an HF-shaped engine cache of `row_dim` elements per head and slot, random.
struct F32Rig {
  std::size_t half, row_bytes;
  std::vector<float> pool, k, v;
  std::vector<std::uintptr_t> kb, vb;
  PoolView view;
  KvLayout layout;
  F32Rig(std::uint32_t pool_slots, std::uint32_t cache_slots, std::uint32_t row_dim, std::uint32_t seed)
      : half(std::size_t{kKvHeads} * row_dim),
        row_bytes(2 * half * sizeof(float)),
        pool(random_floats(std::size_t{kLayers} * pool_slots * 2 * half, seed, 1.0f)),
        k(random_floats(half * cache_slots * kLayers, seed + 1, 1.0f)),
        v(random_floats(k.size(), seed + 2, 1.0f)) {
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      kb.push_back(reinterpret_cast<std::uintptr_t>(k.data() + l * half * cache_slots));
      vb.push_back(reinterpret_cast<std::uintptr_t>(v.data() + l * half * cache_slots));
    }
    view = PoolView{reinterpret_cast<std::byte*>(pool.data()), row_bytes, pool_slots * row_bytes, pool_slots, kLayers};
    layout = make_hf_layout(kLayers, kKvHeads, row_dim, KvDtype::kF32, cache_slots, kb, vb);
  }
};

// The CPU executor attends T0 slots of the engine's cache, then pool rows of one layer: the same
// bits as attend_rows over those rows; a bad slot or layer is refused before anything is written.
TEST(AttendRows, CpuExecutorAttendsCacheSlotsThenPoolRows) {
  constexpr std::uint32_t kPoolSlots = 12, kCacheSlots = 8;
  const F32Rig rig(kPoolSlots, kCacheSlots, kDim, 21);
  const PoolView& view = rig.view;
  const KvLayout& l = rig.layout;
  const auto& kb = rig.kb;
  const auto& vb = rig.vb;
  auto executor = std::move(*make_executor(Backend::kCpu));
  const std::vector<float> q = random_floats(kQHeads * kDim, 5, 1.0f);
  const HostQuery query{q.data(), kQHeads, kDim, 0.25f};
  Result early;
  EXPECT_EQ(executor->attend(1, {}, 0, {}, {}, query, early.view(0)).error().code, Errc::kBadState);  // no initialize
  ASSERT_TRUE(executor->initialize(l, view));

  const std::vector<std::uint32_t> t0{6, 1}, slots{9, 2, 11, 4};
  Result got;
  ASSERT_TRUE(executor->attend(1, t0, t0.size(), slots, {}, query, got.view(6)));
  std::vector<AttendRow> rows;
  for (std::uint32_t s : t0) {
    const std::size_t at = l.slot_offset(s);
    rows.push_back({reinterpret_cast<const std::byte*>(kb[1]) + at, reinterpret_cast<const std::byte*>(vb[1]) + at,
                    l.head_stride});
  }
  for (std::uint32_t s : slots) rows.push_back({view.row(1, s), view.row(1, s) + kHalf * sizeof(float), kDim * 4});
  const Result want = attend(KvDtype::kF32, q, rows, 0.25f);
  expect_same_bits(got, want);

  Result refused;
  const std::vector<std::uint32_t> bad{1, kPoolSlots}, bad_t0{kCacheSlots};
  EXPECT_EQ(executor->attend(0, {}, 0, bad, {}, query, refused.view(2)).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(executor->attend(0, bad_t0, 1, {}, {}, query, refused.view(1)).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(executor->attend(kLayers, {}, 0, slots, {}, query, refused.view(4)).error().code, Errc::kInvalidArgument);
  const std::vector<std::uint32_t> two{1, 2};
  const std::vector<std::uint8_t> int8{0, 1};  // a flagged row without an int8 pool
  EXPECT_EQ(executor->attend(0, {}, 0, two, int8, query, refused.view(2)).error().code, Errc::kBadState);
  EXPECT_EQ(refused.out, Result{}.out);  // nothing written
  EXPECT_EQ(refused.lse, Result{}.lse);
}

// A slot holding a block of kTokens tokens per head (vLLM's; layout head_dim = kTokens · kDim):
// the executor attends token by token, the first t0_tokens of the T0 slots (the last block part
// written) and every token of each pool row, the same bits as attend_rows over those tokens; a
// t0_tokens that leaves a T0 slot unread or reaches past the slots is refused.
TEST(AttendRows, CpuExecutorAttendsEveryTokenOfBlockSlots) {
  constexpr std::uint32_t kTokens = 4, kPoolSlots = 6, kCacheSlots = 5, kBlockDim = kTokens * kDim;
  const F32Rig rig(kPoolSlots, kCacheSlots, kBlockDim, 31);
  const std::size_t half = rig.half;
  const PoolView& view = rig.view;
  const KvLayout& l = rig.layout;
  const auto& kb = rig.kb;
  const auto& vb = rig.vb;
  auto executor = std::move(*make_executor(Backend::kCpu));
  ASSERT_TRUE(executor->initialize(l, view));
  const std::vector<float> q = random_floats(kQHeads * kDim, 7, 1.0f);
  const HostQuery query{q.data(), kQHeads, kDim, 0.25f};

  const std::vector<std::uint32_t> t0{3, 0}, slots{5, 2};
  constexpr std::size_t kT0Tokens = kTokens + 2, kRows = kT0Tokens + 2 * kTokens;
  Result got;
  ASSERT_TRUE(executor->attend(1, t0, kT0Tokens, slots, {}, query, got.view(kRows)));
  std::vector<AttendRow> rows;
  const std::size_t token = kDim * sizeof(float);
  for (std::size_t t = 0; t < kT0Tokens; ++t) {
    const std::size_t at = l.slot_offset(t0[t / kTokens]) + (t % kTokens) * token;
    rows.push_back({reinterpret_cast<const std::byte*>(kb[1]) + at, reinterpret_cast<const std::byte*>(vb[1]) + at,
                    l.head_stride});
  }
  for (std::uint32_t s : slots) {
    for (std::size_t t = 0; t < kTokens; ++t) {
      const std::byte* row = view.row(1, s) + t * token;
      rows.push_back({row, row + half * sizeof(float), kBlockDim * sizeof(float)});
    }
  }
  ASSERT_EQ(rows.size(), kRows);
  const Result want = attend(KvDtype::kF32, q, rows, 0.25f);
  expect_same_bits(got, want);

  Result refused;
  for (const std::size_t t0_tokens : {std::size_t{kTokens}, 2 * std::size_t{kTokens} + 1}) {  // slot 0 unread; past it
    const auto rows_then = t0_tokens + 2 * kTokens;
    EXPECT_EQ(executor->attend(1, t0, t0_tokens, slots, {}, query, refused.view(rows_then)).error().code,
              Errc::kInvalidArgument)
        << t0_tokens;
  }
  EXPECT_EQ(executor->attend(1, {}, 1, slots, {}, query, refused.view(1 + 2 * kTokens)).error().code,
            Errc::kInvalidArgument);  // tokens without slots
  const HostQuery odd{q.data(), kQHeads, kDim + 1, 0.25f};  // 21 does not divide 80
  EXPECT_EQ(executor->attend(1, t0, kT0Tokens, slots, {}, odd, refused.view(kRows)).error().code,
            Errc::kInvalidArgument);
  EXPECT_EQ(refused.out, Result{}.out);  // nothing written
  EXPECT_EQ(refused.lse, Result{}.lse);
}

// Dim-major keys (vLLM's CPU backend: element e of token t of a slot's head row at e · n + t),
// values token-major, in float32 and bfloat16: the executor's tokens (full blocks of 8 read in
// place, a partial one and 16-bit ones converted) match a float64 reference over the same keys.
TEST(AttendRows, DimMajorKeysMatchAFloat64Reference) {
  constexpr std::uint32_t kTokens = 16, kPoolSlots = 6, kCacheSlots = 5, kBlockDim = kTokens * kDim;
  constexpr std::size_t kHalfRow = std::size_t{kKvHeads} * kBlockDim;
  const std::vector<std::uint32_t> t0{3, 0}, slots{5, 2};
  constexpr std::size_t kT0Tokens = kTokens + 5, kRows = kT0Tokens + 2 * kTokens;
  const std::vector<float> q = random_floats(kQHeads * kDim, 8, 1.0f);
  for (const KvDtype dtype : {KvDtype::kF32, KvDtype::kBf16}) {
    const std::size_t es = dtype_bytes(dtype);
    std::vector<std::vector<float>> pool_f, cache_f;  // what the bytes hold, per slot [K heads, V heads]
    const std::vector<float> pool_src = random_floats(std::size_t{kLayers} * kPoolSlots * 2 * kHalfRow, 41, 1.0f);
    const std::vector<float> cache_src = random_floats(std::size_t{kLayers} * kCacheSlots * 2 * kHalfRow, 42, 1.0f);
    std::vector<std::byte> pool(pool_src.size() * es), cache(cache_src.size() * es);
    std::vector<float> pool_back(pool_src.size()), cache_back(cache_src.size());
    from_f32(dtype, pool_src.data(), pool.data(), pool_src.size());
    to_f32(dtype, pool.data(), pool_back.data(), pool_src.size());
    from_f32(dtype, cache_src.data(), cache.data(), cache_src.size());
    to_f32(dtype, cache.data(), cache_back.data(), cache_src.size());
    const std::size_t row_bytes = 2 * kHalfRow * es;
    const PoolView view{pool.data(), row_bytes, kPoolSlots * row_bytes, kPoolSlots, kLayers};
    // The cache as one tensor [layers, slots, 2 (K, V), kv_heads, block_dim], as a layout of K and V bases.
    std::vector<std::uintptr_t> kb, vb;
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      kb.push_back(reinterpret_cast<std::uintptr_t>(cache.data() + l * kCacheSlots * row_bytes));
      vb.push_back(kb.back() + kHalfRow * es);
    }
    KvLayout l = make_hf_layout(kLayers, kKvHeads, kBlockDim, dtype, kCacheSlots, kb, vb);
    l.token_stride = row_bytes;  // slot stride
    l.head_stride = kBlockDim * es;
    auto executor = std::move(*make_executor(Backend::kCpu));
    ASSERT_TRUE(executor->initialize(l, view));
    HostQuery query{q.data(), kQHeads, kDim, 0.25f};
    query.keys_dim_major = true;
    Result got;
    ASSERT_TRUE(executor->attend(1, t0, kT0Tokens, slots, {}, query, got.view(kRows)));

    // Token t of a slot whose floats start at `at`: K element e of head h at h · block_dim + e · n + t.
    const auto token = [&](const std::vector<float>& f, std::size_t at, std::size_t t) {
      std::vector<float> row(2 * kHalf);
      for (std::uint32_t h = 0; h < kKvHeads; ++h) {
        for (std::uint32_t e = 0; e < kDim; ++e) {
          row[h * kDim + e] = f[at + h * kBlockDim + e * kTokens + t];
          row[kHalf + h * kDim + e] = f[at + kHalfRow + h * kBlockDim + t * kDim + e];
        }
      }
      return row;
    };
    std::vector<std::vector<float>> rows;
    for (std::size_t t = 0; t < kT0Tokens; ++t) {
      rows.push_back(token(cache_back, (std::size_t{1} * kCacheSlots + t0[t / kTokens]) * 2 * kHalfRow, t % kTokens));
    }
    for (std::uint32_t s : slots) {
      for (std::size_t t = 0; t < kTokens; ++t) {
        rows.push_back(token(pool_back, (std::size_t{1} * kPoolSlots + s) * 2 * kHalfRow, t));
      }
    }
    expect_matches(got, reference(q, rows, 0.25), 2e-5);
  }
}

}  // namespace
}  // namespace kvtier::kernels
