// paged_block_scores (paged_scores.hpp): per row and kv head, the queries in tiles; per tile one
// pass over the row's keys (each key read once, dotted with every query vector of the tile),
// then one softmax per query vector and the per-block sums.
#include "kvtier/kernels/paged_scores.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvtier::kernels {
namespace {

constexpr std::uint32_t kQueryTile = 16;  // queries per pass over a row's keys

Status invalid(const std::string& message) { return make_error(Errc::kInvalidArgument, "block scores: " + message); }

// out[v] = a[v] · k (n floats each) for v < count ≤ 4. The four products share each load of k,
// and one transpose sums the four accumulators. Fixed order for given n, so it is deterministic.
void dot4(const float* const* a, std::uint32_t count, const float* k, std::uint32_t n, float* out) noexcept {
  const float* a0 = a[0];
  const float* a1 = a[std::min(1u, count - 1)];
  const float* a2 = a[std::min(2u, count - 1)];
  const float* a3 = a[std::min(3u, count - 1)];
  float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  std::uint32_t i = 0;
#if defined(__SSE2__)
  __m128 s0 = _mm_setzero_ps(), s1 = _mm_setzero_ps(), s2 = _mm_setzero_ps(), s3 = _mm_setzero_ps();
  for (; i + 4 <= n; i += 4) {
    const __m128 kk = _mm_loadu_ps(k + i);
    s0 = _mm_add_ps(s0, _mm_mul_ps(_mm_loadu_ps(a0 + i), kk));
    s1 = _mm_add_ps(s1, _mm_mul_ps(_mm_loadu_ps(a1 + i), kk));
    s2 = _mm_add_ps(s2, _mm_mul_ps(_mm_loadu_ps(a2 + i), kk));
    s3 = _mm_add_ps(s3, _mm_mul_ps(_mm_loadu_ps(a3 + i), kk));
  }
  // Transpose: lane v of the result is the sum of s_v's four lanes.
  const __m128 lo01 = _mm_unpacklo_ps(s0, s1), hi01 = _mm_unpackhi_ps(s0, s1);
  const __m128 lo23 = _mm_unpacklo_ps(s2, s3), hi23 = _mm_unpackhi_ps(s2, s3);
  const __m128 total = _mm_add_ps(_mm_add_ps(_mm_movelh_ps(lo01, lo23), _mm_movehl_ps(lo23, lo01)),
                                  _mm_add_ps(_mm_movelh_ps(hi01, hi23), _mm_movehl_ps(hi23, hi01)));
  _mm_storeu_ps(sums, total);
#endif
  const float* rows[4] = {a0, a1, a2, a3};
  for (; i < n; ++i) {
    for (std::uint32_t v = 0; v < 4; ++v) sums[v] += rows[v][i] * k[i];
  }
  for (std::uint32_t v = 0; v < count; ++v) out[v] = sums[v];
}

float from_bits(std::uint32_t bits) noexcept {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float bf16_to_float(std::uint16_t h) noexcept { return from_bits(std::uint32_t{h} << 16); }

// IEEE binary16 to binary32, exact for every value (subnormals normalized, inf and NaN kept).
float f16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  std::uint32_t exponent = (h >> 10) & 0x1Fu;
  std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return from_bits(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return from_bits(sign);
  exponent = 113;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --exponent;
  }
  return from_bits(sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13));
}

// One key as floats: in place for contiguous f32, gathered (and converted) into `scratch` otherwise.
const float* key_row(const PagedKeys& keys, std::int32_t block, std::uint32_t head, std::uint32_t token,
                     float* scratch) noexcept {
  const std::size_t at = static_cast<std::size_t>(block) * keys.block_stride + head * keys.head_stride +
                         token * keys.token_stride;
  const std::size_t step = keys.dim_stride;
  if (keys.type == KeyType::kF32) {
    const float* k = static_cast<const float*>(keys.base) + at;
    if (step == 1) return k;
    for (std::uint32_t i = 0; i < keys.head_dim; ++i) scratch[i] = k[i * step];
    return scratch;
  }
  const auto* bits = static_cast<const std::uint16_t*>(keys.base) + at;
  for (std::uint32_t i = 0; i < keys.head_dim; ++i) {
    scratch[i] = keys.type == KeyType::kBF16 ? bf16_to_float(bits[i * step]) : f16_to_float(bits[i * step]);
  }
  return scratch;
}

Status validate(const PagedKeys& keys, const ScoreBatch& b, std::span<float> out, std::uint32_t out_stride) {
  if (keys.base == nullptr || keys.kv_heads == 0 || keys.block_size == 0 || keys.head_dim == 0 || keys.dim_stride == 0) {
    return invalid("keys need a base, kv heads, a block size, a head size and a dim stride");
  }
  if (b.q_heads == 0 || b.q_heads % keys.kv_heads != 0) {
    return invalid(std::to_string(b.q_heads) + " query heads are not a multiple of " + std::to_string(keys.kv_heads) +
                   " kv heads");
  }
  const std::size_t rows = b.seq_lens.size();
  if (b.query_start.size() != rows + 1 || b.block_table.size() != rows * b.table_stride) {
    return invalid("block_table [rows, blocks], seq_lens [rows] and query_start [rows + 1] disagree on rows");
  }
  if (out_stride < b.table_stride || out.size() < rows * out_stride) {
    return invalid("out needs [rows, at least the block table's width] floats");
  }
  if (b.query_start[0] < 0 || static_cast<std::uint32_t>(b.query_start[rows]) > b.tokens) {
    return invalid("query_start outside the " + std::to_string(b.tokens) + " query tokens");
  }
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int64_t n = b.seq_lens[r];
    const std::int64_t q = std::int64_t{b.query_start[r + 1]} - b.query_start[r];
    const std::int64_t blocks = (n + keys.block_size - 1) / keys.block_size;
    const std::string row = "row " + std::to_string(r) + ": ";
    if (n < 0 || q < 0 || q > n) return invalid(row + std::to_string(q) + " queries over " + std::to_string(n) + " keys");
    if (blocks > b.table_stride) return invalid(row + std::to_string(n) + " keys need more blocks than the table has");
    for (std::int64_t u = 0; u < blocks; ++u) {
      const std::int32_t id = b.block_table[r * b.table_stride + static_cast<std::size_t>(u)];
      if (id < 0 || static_cast<std::uint32_t>(id) >= keys.num_blocks) {
        return invalid(row + "block id " + std::to_string(id) + " outside the cache's " +
                       std::to_string(keys.num_blocks) + " blocks");
      }
    }
  }
  return {};
}

}  // namespace

Status paged_block_scores(const PagedKeys& keys, const ScoreBatch& b, std::span<float> out,
                          std::uint32_t out_stride) {
  if (auto ok = validate(keys, b, out, out_stride); !ok) return ok;
  const std::uint32_t d = keys.head_dim, bs = keys.block_size, group = b.q_heads / keys.kv_heads;
  const float per_head = 1.0f / static_cast<float>(b.q_heads);
  std::vector<float> logits;
  std::vector<float> scratch(d);
  std::vector<const float*> query_rows(static_cast<std::size_t>(kQueryTile) * group);
  for (std::size_t r = 0; r < b.seq_lens.size(); ++r) {
    float* scores = out.data() + r * out_stride;
    std::fill(scores, scores + out_stride, 0.0f);
    const auto n = static_cast<std::uint32_t>(b.seq_lens[r]);
    const auto first_query = static_cast<std::uint32_t>(b.query_start[r]);
    const auto queries = static_cast<std::uint32_t>(b.query_start[r + 1]) - first_query;
    const std::uint32_t scored = n / bs * bs;  // keys of full blocks
    if (scored == 0) continue;
    const std::int32_t* table = b.block_table.data() + r * b.table_stride;
    for (std::uint32_t head = 0; head < keys.kv_heads; ++head) {
      for (std::uint32_t j0 = 0; j0 < queries; j0 += kQueryTile) {
        const std::uint32_t tile = std::min(kQueryTile, queries - j0);
        const std::uint32_t vectors = tile * group;
        const std::uint32_t seen = n - queries + j0 + tile;  // keys the tile's last query sees
        logits.resize(static_cast<std::size_t>(vectors) * seen);
        // Query vector v = (query j0 + v / group, query head head · group + v % group).
        const float* q = b.query + (static_cast<std::size_t>(first_query + j0) * b.q_heads + head * group) * d;
        for (std::uint32_t v = 0; v < vectors; ++v) {
          query_rows[v] = q + (static_cast<std::size_t>(v / group) * b.q_heads + v % group) * d;
        }
        for (std::uint32_t t = 0; t < seen; ++t) {
          const float* k = key_row(keys, table[t / bs], head, t % bs, scratch.data());
          for (std::uint32_t v0 = 0; v0 < vectors; v0 += 4) {
            float dots[4];
            const std::uint32_t count = std::min(4u, vectors - v0);
            dot4(query_rows.data() + v0, count, k, d, dots);
            for (std::uint32_t v = 0; v < count; ++v) logits[static_cast<std::size_t>(v0 + v) * seen + t] = b.scale * dots[v];
          }
        }
        for (std::uint32_t v = 0; v < vectors; ++v) {
          float* row = logits.data() + static_cast<std::size_t>(v) * seen;
          const std::uint32_t limit = n - queries + j0 + v / group + 1;  // causal: up to its own position
          const float top = *std::max_element(row, row + limit);
          float sum = 0.0f;
          for (std::uint32_t t = 0; t < limit; ++t) {
            row[t] = std::exp(row[t] - top);
            sum += row[t];
          }
          const float weight = per_head / sum;
          const std::uint32_t end = std::min(limit, scored);
          for (std::uint32_t t0 = 0; t0 < end; t0 += bs) {
            float block = 0.0f;
            for (std::uint32_t t = t0; t < std::min(t0 + bs, end); ++t) block += row[t];
            scores[t0 / bs] += block * weight;
          }
        }
      }
    }
  }
  return {};
}

}  // namespace kvtier::kernels
