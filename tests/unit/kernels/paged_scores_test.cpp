// paged_block_scores against a double-precision reference written from the header's formula:
// decode and prefill rows, grouped query heads, a partial last block, scattered and strided
// blocks, dim-major keys (vLLM's CPU layout), 16-bit keys, and every rejected input.
#include "kvtier/kernels/paged_scores.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace kvtier::kernels {
namespace {

// A cache of `blocks` blocks laid out [block, kv_head, 2 · block_size (K rows then V rows), dim],
// as vLLM's CPU backend has it: the keys are a strided view.
struct Fixture {
  std::uint32_t blocks = 12, kv_heads = 2, q_heads = 6, bs = 4, dim = 12;
  std::vector<float> cache, query;
  std::vector<std::int32_t> table, seq_lens, query_start;
  std::uint32_t table_stride = 5;
  bool dim_major = false;  // a block's keys [dim, block_size] per head, as vLLM's CPU "vec" backend stores them

  Fixture() {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    cache.resize(static_cast<std::size_t>(blocks) * kv_heads * 2 * bs * dim);
    for (float& x : cache) x = normal(rng);
    // Row 0: a decode step over 13 keys (3 full blocks and 1 key); row 1: a 5-query prefill
    // chunk over 8 keys; row 2: 3 keys (no full block); row 3: no queries this step.
    seq_lens = {13, 8, 3, 9};
    query_start = {0, 1, 6, 7, 7};
    table = {7, 2, 9, 4, 0, /**/ 3, 11, 0, 0, 0, /**/ 5, 0, 0, 0, 0, /**/ 1, 6, 8, 0, 0};
    query.resize(static_cast<std::size_t>(query_start.back()) * q_heads * dim);
    for (float& x : query) x = normal(rng);
  }
  PagedKeys keys() const {
    return PagedKeys{cache.data(),
                     KeyType::kF32,
                     blocks,
                     kv_heads,
                     bs,
                     dim,
                     static_cast<std::size_t>(kv_heads) * 2 * bs * dim,
                     static_cast<std::size_t>(2) * bs * dim,
                     dim_major ? 1 : dim,
                     dim_major ? bs : 1};
  }
  ScoreBatch batch() const {
    return ScoreBatch{query.data(), static_cast<std::uint32_t>(query_start.back()), q_heads, table, table_stride,
                      seq_lens, query_start, 0.3f};
  }
  float key(std::int32_t block, std::uint32_t head, std::uint32_t token, std::uint32_t i) const {
    const std::size_t base = (static_cast<std::size_t>(block) * kv_heads + head) * 2 * bs * dim;
    return cache[base + (dim_major ? i * bs + token : token * dim + i)];
  }
  // The header's formula, in double.
  std::vector<double> reference() const {
    const std::size_t rows = seq_lens.size();
    std::vector<double> out(rows * table_stride, 0.0);
    const std::uint32_t group = q_heads / kv_heads;
    for (std::size_t r = 0; r < rows; ++r) {
      const auto n = static_cast<std::uint32_t>(seq_lens[r]);
      const auto q = static_cast<std::uint32_t>(query_start[r + 1] - query_start[r]);
      for (std::uint32_t j = 0; j < q; ++j) {
        for (std::uint32_t h = 0; h < q_heads; ++h) {
          const float* qv = &query[(static_cast<std::size_t>(query_start[r] + j) * q_heads + h) * dim];
          const std::uint32_t seen = n - q + j + 1;
          std::vector<double> logit(seen);
          double top = -INFINITY, sum = 0.0;
          for (std::uint32_t t = 0; t < seen; ++t) {
            double s = 0.0;
            for (std::uint32_t i = 0; i < dim; ++i) {
              s += double{qv[i]} * key(table[r * table_stride + t / bs], h / group, t % bs, i);
            }
            logit[t] = 0.3 * s;
            top = std::max(top, logit[t]);
          }
          for (double& l : logit) sum += l = std::exp(l - top);
          for (std::uint32_t t = 0; t < seen && t < n / bs * bs; ++t) {
            out[r * table_stride + t / bs] += logit[t] / sum / q_heads;
          }
        }
      }
    }
    return out;
  }
};

std::uint16_t bf16_bits(float x) {  // truncation: the test only needs some exact bf16 value
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return static_cast<std::uint16_t>(bits >> 16);
}

TEST(PagedBlockScores, MatchTheFormulaForDecodePrefillAndPartialBlocks) {
  const Fixture f;
  std::vector<float> out(f.seq_lens.size() * f.table_stride, -1.0f);
  ASSERT_TRUE(paged_block_scores(f.keys(), f.batch(), out, f.table_stride));
  const std::vector<double> want = f.reference();
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << "entry " << i;
  // A decode row's query sees every key: its full blocks' scores sum to the probability mass
  // they hold, below 1 by the partial block's share; a row without full blocks or queries is 0.
  EXPECT_GT(out[0] + out[1] + out[2], 0.5f);
  EXPECT_LT(out[0] + out[1] + out[2], 1.0f);
  EXPECT_EQ(out[3], 0.0f);
  for (std::uint32_t u = 0; u < f.table_stride; ++u) {
    EXPECT_EQ(out[2 * f.table_stride + u], 0.0f);
    EXPECT_EQ(out[3 * f.table_stride + u], 0.0f);
  }
  // The prefill row's five queries each hand out (almost) one unit over its two full blocks.
  EXPECT_NEAR(out[f.table_stride] + out[f.table_stride + 1], 5.0, 1e-4);
}

TEST(PagedBlockScores, DimMajorKeysScoreAsTheKeysTheyHold) {
  Fixture f;
  f.dim_major = true;
  std::vector<float> out(f.seq_lens.size() * f.table_stride, -1.0f);
  ASSERT_TRUE(paged_block_scores(f.keys(), f.batch(), out, f.table_stride));
  const std::vector<double> want = f.reference();
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << "entry " << i;
  f.dim_major = false;  // the same bytes read token-major are other keys: other scores
  EXPECT_GT(std::abs(out[0] - f.reference()[0]) + std::abs(out[1] - f.reference()[1]), 1e-3);
}

TEST(PagedBlockScores, SixteenBitKeysScoreAsTheirFloatValues) {
  Fixture f;
  std::vector<std::uint16_t> bf16(f.cache.size());
  for (std::size_t i = 0; i < f.cache.size(); ++i) {
    bf16[i] = bf16_bits(f.cache[i]);
    const std::uint32_t widened = std::uint32_t{bf16[i]} << 16;
    std::memcpy(&f.cache[i], &widened, sizeof widened);  // the f32 cache now holds the bf16 values
  }
  // float16 of small integers is exact: 1.0 = 0x3C00, 2.0 = 0x4000, -1.0 = 0xBC00, 0.5 = 0x3800.
  const std::uint16_t f16_codes[] = {0x3C00, 0x4000, 0xBC00, 0x3800};
  const float f16_values[] = {1.0f, 2.0f, -1.0f, 0.5f};
  Fixture g;
  std::vector<std::uint16_t> f16(g.cache.size());
  for (std::size_t i = 0; i < g.cache.size(); ++i) {
    f16[i] = f16_codes[i % 4];
    g.cache[i] = f16_values[i % 4];
  }
  for (const auto& [fixture, bits, type] : {std::tuple{&f, &bf16, KeyType::kBF16}, std::tuple{&g, &f16, KeyType::kF16}}) {
    std::vector<float> as_float(fixture->seq_lens.size() * fixture->table_stride);
    std::vector<float> as_16(as_float.size());
    ASSERT_TRUE(paged_block_scores(fixture->keys(), fixture->batch(), as_float, fixture->table_stride));
    PagedKeys keys = fixture->keys();
    keys.base = bits->data();
    keys.type = type;
    ASSERT_TRUE(paged_block_scores(keys, fixture->batch(), as_16, fixture->table_stride));
    EXPECT_EQ(as_16, as_float);  // the same arithmetic after an exact conversion
  }
}

TEST(PagedBlockScores, RejectsInputThatDisagreesAndWritesNothing) {
  const auto rejected = [](const Fixture& f, std::uint32_t out_stride = 5) {
    std::vector<float> out(f.seq_lens.size() * 5, -1.0f);
    const Status done = paged_block_scores(f.keys(), f.batch(), out, out_stride);
    EXPECT_FALSE(done);
    if (!done) {
      EXPECT_EQ(done.error().code, Errc::kInvalidArgument);
    }
    for (float x : out) EXPECT_EQ(x, -1.0f);
    return done ? std::string() : done.error().message;
  };
  Fixture f;
  f.table[1] = 12;  // beyond the 12 blocks
  EXPECT_NE(rejected(f).find("block id 12"), std::string::npos);
  f = Fixture();
  f.table[5 + 1] = -1;
  EXPECT_NE(rejected(f).find("block id -1"), std::string::npos);
  f = Fixture();
  f.seq_lens[1] = 4;  // five queries over four keys
  EXPECT_NE(rejected(f).find("5 queries over 4 keys"), std::string::npos);
  f = Fixture();
  f.seq_lens[0] = 21;  // six blocks, the table has five
  EXPECT_NE(rejected(f).find("more blocks"), std::string::npos);
  f = Fixture();
  f.q_heads = 5;
  EXPECT_NE(rejected(f).find("multiple"), std::string::npos);
  f = Fixture();
  f.query_start.pop_back();
  EXPECT_NE(rejected(f).find("rows"), std::string::npos);
  EXPECT_NE(rejected(Fixture(), 4).find("out needs"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::kernels
