// PartialAttention and CopyExecutor::attend_host: the partial (out, lse) of one decode query over
// host rows against a float64 reference, the log-sum-exp merge of two parts against attention
// over all rows, the empty part, the probabilities, the request checks, and the same bits from every
// instruction set of the row loop.
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

// float64 attention of query head h over rows (float32, K then V): lse and out.
struct Reference {
  std::vector<double> out, lse, probs;  // probs [q_heads, rows]: exp(s_i − lse)
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

struct Partial {
  std::vector<float> out = std::vector<float>(kQHeads * kDim, -1.0f), lse = std::vector<float>(kQHeads, -1.0f);
  std::vector<float> probs;
  HostPartial view(std::size_t rows) {
    probs.assign(kQHeads * rows, 0.0f);
    return HostPartial{out.data(), lse.data(), probs.data(), rows};
  }
};

// Rows as the pool holds them, in `dtype`; `as_f32` gets what the kernel reads (dtype-rounded).
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

// The rows in one add call, or in two when `split` > 0 (the first `split` rows, then the rest).
Partial attend(KvDtype dtype, const std::vector<float>& q, const std::vector<std::byte>& bytes, std::size_t rows,
               float scale, std::size_t split = 0) {
  Partial p;
  const HostPartial out = p.view(rows);
  const KvLayout l = layout(dtype);
  const HostQuery query{q.data(), kQHeads, kDim, scale};
  EXPECT_TRUE(validate_host_attention(l, query, out, rows));
  PartialAttention attention(l, query, out);
  std::vector<const std::byte*> pointers;
  for (std::size_t i = 0; i < rows; ++i) pointers.push_back(bytes.data() + i * l.row_bytes());
  attention.add({pointers.data(), split});
  attention.add({pointers.data() + split, rows - split});
  attention.finish();
  return p;
}

std::vector<std::vector<float>> random_rows(std::size_t n, std::uint32_t seed) {
  std::vector<std::vector<float>> rows(n);
  for (std::size_t i = 0; i < n; ++i) rows[i] = random_floats(2 * kHalf, seed + static_cast<std::uint32_t>(i), 1.0f);
  return rows;
}

TEST(PartialAttention, MatchesAFloat64ReferenceInEveryDtype) {
  const float scale = 1.0f / std::sqrt(float{kDim});
  const std::vector<float> q = random_floats(kQHeads * kDim, 7, 2.0f);  // peaked softmax: a max that moves
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    std::vector<std::vector<float>> read;
    const auto rows = random_rows(300, 100);
    const auto bytes = encode(dtype, rows, read);
    const Partial got = attend(dtype, q, bytes, rows.size(), scale, 101);  // calls of 101 and 199 rows
    const Reference want = reference(q, read, scale);
    for (std::size_t i = 0; i < got.out.size(); ++i) EXPECT_NEAR(got.out[i], want.out[i], 1e-5) << i;
    for (std::size_t h = 0; h < kQHeads; ++h) EXPECT_NEAR(got.lse[h], want.lse[h], 1e-5) << h;
    for (std::size_t i = 0; i < got.probs.size(); ++i) EXPECT_NEAR(got.probs[i], want.probs[i], 1e-6) << i;
  }
}

TEST(PartialAttention, TwoPartsMergedByLogSumExpEqualAttentionOverAllRows) {
  const float scale = 0.3f;
  const std::vector<float> q = random_floats(kQHeads * kDim, 11, 1.0f);
  std::vector<std::vector<float>> read;
  const auto rows = random_rows(90, 500);
  const auto bytes = encode(KvDtype::kF32, rows, read);
  const std::size_t split = 37, row_bytes = 2 * kHalf * sizeof(float);
  const std::vector<std::byte> a(bytes.begin(), bytes.begin() + split * row_bytes);
  const std::vector<std::byte> b(bytes.begin() + split * row_bytes, bytes.end());
  const Partial pa = attend(KvDtype::kF32, q, a, split, scale), pb = attend(KvDtype::kF32, q, b, 90 - split, scale);
  const Reference all = reference(q, read, scale);
  for (std::uint32_t h = 0; h < kQHeads; ++h) {
    const double lse = std::log(std::exp(double{pa.lse[h]}) + std::exp(double{pb.lse[h]}));
    EXPECT_NEAR(lse, all.lse[h], 1e-5);
    for (std::uint32_t d = 0; d < kDim; ++d) {
      const double merged = std::exp(pa.lse[h] - lse) * pa.out[h * kDim + d] + std::exp(pb.lse[h] - lse) * pb.out[h * kDim + d];
      EXPECT_NEAR(merged, all.out[h * kDim + d], 1e-5);
    }
  }
}

TEST(PartialAttention, NoRowsGiveMinusInfinityAndZeros) {
  const std::vector<float> q = random_floats(kQHeads * kDim, 3, 1.0f);
  const Partial p = attend(KvDtype::kF32, q, {}, 0, 0.5f);
  for (float lse : p.lse) EXPECT_EQ(lse, -std::numeric_limits<float>::infinity());
  for (float x : p.out) EXPECT_EQ(x, 0.0f);
}

TEST(PartialAttention, RequestChecksRefuseABadQueryOrStride) {
  const std::vector<float> q(kQHeads * kDim);
  Partial p;
  const KvLayout l = layout(KvDtype::kF32);
  const HostPartial out = p.view(4);
  const auto code = [&](HostQuery query, HostPartial o, std::size_t rows) {
    const Status s = validate_host_attention(l, query, o, rows);
    return s ? Errc::kOk : s.error().code;
  };
  EXPECT_EQ(code({q.data(), kQHeads, kDim, 0.5f}, out, 4), Errc::kOk);
  EXPECT_EQ(code({nullptr, kQHeads, kDim, 0.5f}, out, 4), Errc::kInvalidArgument);
  EXPECT_EQ(code({q.data(), 5, kDim, 0.5f}, out, 4), Errc::kInvalidArgument);  // not a multiple of 2 KV heads
  EXPECT_EQ(code({q.data(), 0, kDim, 0.5f}, out, 4), Errc::kInvalidArgument);
  EXPECT_EQ(code({q.data(), kQHeads, kDim, std::numeric_limits<float>::infinity()}, out, 4), Errc::kInvalidArgument);
  EXPECT_EQ(code({q.data(), kQHeads, kDim + 1, 0.5f}, out, 4), Errc::kInvalidArgument);  // not the layout's
  EXPECT_EQ(code({q.data(), kQHeads, kDim, 0.5f}, out, 5), Errc::kInvalidArgument);  // probs_stride 4 < 5 rows
  EXPECT_EQ(code({q.data(), kQHeads, kDim, 0.5f}, HostPartial{out.out, nullptr, nullptr, 0}, 4), Errc::kInvalidArgument);
  EXPECT_EQ(code({q.data(), kQHeads, kDim, 0.5f}, HostPartial{out.out, out.lse, nullptr, 0}, 9), Errc::kOk);  // no probs
}

// The AVX2 loop (where this CPU has it) gives the baseline loop's bits, block by block.
TEST(PartialAttention, EveryInstructionSetGivesTheSameBits) {
  const detail::AddBlock avx2 = detail::avx2_add_block();
  if (avx2 == nullptr) GTEST_SKIP() << "this CPU (or build) has no AVX2 loop to compare";
  const std::vector<float> q = random_floats(kQHeads * kDim, 13, 2.0f);
  const auto rows = random_rows(203, 900);  // a last block of 3 rows
  std::vector<float> state[2][3];  // per loop: max, sum, acc
  std::vector<float> logits[2];
  for (int which = 0; which < 2; ++which) {
    auto& [max, sum, acc] = state[which];
    max.assign(kQHeads, -std::numeric_limits<float>::infinity());
    sum.assign(kQHeads, 0.0f);
    acc.assign(kQHeads * kDim, 0.0f);
    logits[which].assign(kQHeads * rows.size(), 0.0f);
    const detail::AddBlock add = which == 0 ? detail::baseline_add_block() : avx2;
    detail::AttentionState s{q.data(), 0.125f, kQHeads, kQHeads / kKvHeads, kDim, kHalf, max.data(), sum.data(),
                             acc.data(), logits[which].data(), rows.size(), 0, nullptr, 0, 0};
    for (std::size_t i = 0; i < rows.size(); i += 8) {
      const float* block[8];
      const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(8, rows.size() - i));
      for (std::uint32_t r = 0; r < n; ++r) block[r] = rows[i + r].data();
      add(s, block, n);
    }
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(state[0][i], state[1][i]) << i;
  EXPECT_EQ(logits[0], logits[1]);
  for (int which = 0; which < 2; ++which) {
    const detail::ToProbs to_probs = which == 0 ? detail::baseline_to_probs() : detail::avx2_to_probs();
    to_probs(logits[which].data(), logits[which].size() - 3, 2.5f);  // 1,215 values: a tail of 7
  }
  EXPECT_EQ(logits[0], logits[1]);
}

// The CPU executor attends pool rows of one layer in list order: the same bits as the
// accumulator over those rows; a bad slot or layer is refused before anything is written.
TEST(AttendHost, CpuExecutorAttendsTheListedPoolRowsOfOneLayer) {
  constexpr std::uint32_t kSlots = 12;
  std::vector<float> pool = random_floats(std::size_t{kLayers} * kSlots * 2 * kHalf, 21, 1.0f);
  const std::size_t row_bytes = 2 * kHalf * sizeof(float);
  const PoolView view{reinterpret_cast<std::byte*>(pool.data()), row_bytes, kSlots * row_bytes, kSlots, kLayers};
  std::vector<float> k(kHalf * 8 * kLayers), v(k.size());
  std::vector<std::uintptr_t> kb, vb;
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    kb.push_back(reinterpret_cast<std::uintptr_t>(k.data() + l * kHalf * 8));
    vb.push_back(reinterpret_cast<std::uintptr_t>(v.data() + l * kHalf * 8));
  }
  const KvLayout l = make_hf_layout(kLayers, kKvHeads, kDim, KvDtype::kF32, 8, kb, vb);
  auto executor = std::move(*make_executor(Backend::kCpu));
  const std::vector<float> q = random_floats(kQHeads * kDim, 5, 1.0f);
  const HostQuery query{q.data(), kQHeads, kDim, 0.25f};
  Partial early;
  EXPECT_EQ(executor->attend_host(1, {}, {}, query, early.view(0)).error().code, Errc::kBadState);  // no initialize
  ASSERT_TRUE(executor->initialize(l, view));

  const std::vector<std::uint32_t> slots{9, 2, 11, 4};
  Partial got;
  ASSERT_TRUE(executor->attend_host(1, slots, {}, query, got.view(slots.size())));
  std::vector<std::byte> rows;
  for (std::uint32_t s : slots) {
    const auto* row = view.row(1, s);
    rows.insert(rows.end(), row, row + row_bytes);
  }
  const Partial want = attend(KvDtype::kF32, q, rows, slots.size(), 0.25f);
  EXPECT_EQ(got.out, want.out);
  EXPECT_EQ(got.lse, want.lse);
  EXPECT_EQ(got.probs, want.probs);

  Partial refused;
  const std::vector<std::uint32_t> bad{1, kSlots};
  EXPECT_EQ(executor->attend_host(0, bad, {}, query, refused.view(2)).error().code, Errc::kInvalidArgument);
  EXPECT_EQ(executor->attend_host(kLayers, slots, {}, query, refused.view(4)).error().code, Errc::kInvalidArgument);
  const std::vector<std::uint32_t> two{1, 2};
  const std::vector<std::uint8_t> int8{0, 1};  // a flagged row without an int8 pool
  EXPECT_EQ(executor->attend_host(0, two, int8, query, refused.view(2)).error().code, Errc::kBadState);
  EXPECT_EQ(refused.out, Partial{}.out);  // nothing written
  EXPECT_EQ(refused.lse, Partial{}.lse);
}

}  // namespace
}  // namespace kvtier::kernels
