// PartialAttention (host_attention.hpp): online softmax over rows in host memory. The per-row
// loop is written once over 8-lane vectors and built per instruction set (host_attention_rows.hpp).
#include "kvtier/kernels/host_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "host_attention_rows.hpp"
#include "kvtier/kernels/quantize.hpp"

// The vectors below are passed only between always-inlined functions of this file, so the ABI
// note that GCC gives for 32-byte vectors without AVX is moot.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace kvtier::kernels {
namespace detail {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

using V8 = float __attribute__((vector_size(32)));  // 8 lanes on every instruction set
using I8 = std::int32_t __attribute__((vector_size(32)));

[[gnu::always_inline]] inline V8 load8(const float* p) noexcept {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

[[gnu::always_inline]] inline void store8(float* p, const V8& v) noexcept { std::memcpy(p, &v, sizeof v); }

[[gnu::always_inline]] inline V8 splat(float x) noexcept { return V8{} + x; }

// q · k as 8 lane sums: two accumulators (even and odd chunks of 8, so that consecutive
// multiply-adds do not wait for each other), added; a tail of n % 8 elements goes to lanes 0...
[[gnu::always_inline]] inline V8 dot_lanes(const float* q, const float* k, std::uint32_t n) noexcept {
  V8 even = {}, odd = {};
  std::uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    even += load8(q + i) * load8(k + i);
    odd += load8(q + i + 8) * load8(k + i + 8);
  }
  for (; i + 8 <= n; i += 8) even += load8(q + i) * load8(k + i);
  if (i < n) {
    float qt[8] = {}, kt[8] = {};
    std::memcpy(qt, q + i, (n - i) * sizeof(float));
    std::memcpy(kt, k + i, (n - i) * sizeof(float));
    even += load8(qt) * load8(kt);
  }
  return even + odd;
}

// Lane r of the result: the sum of the lanes of a[r], ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)),
// by three rounds of shuffles and adds.
[[gnu::always_inline]] inline V8 sum_lanes(const V8* a) noexcept {
  const auto pair = [](const V8& x, const V8& y) {
    return __builtin_shufflevector(x, y, 0, 8, 2, 10, 4, 12, 6, 14) +
           __builtin_shufflevector(x, y, 1, 9, 3, 11, 5, 13, 7, 15);
  };
  const V8 b01 = pair(a[0], a[1]), b23 = pair(a[2], a[3]), b45 = pair(a[4], a[5]), b67 = pair(a[6], a[7]);
  const auto quad = [](const V8& x, const V8& y) {
    return __builtin_shufflevector(x, y, 0, 1, 8, 9, 4, 5, 12, 13) +
           __builtin_shufflevector(x, y, 2, 3, 10, 11, 6, 7, 14, 15);
  };
  const V8 c0 = quad(b01, b23), c1 = quad(b45, b67);
  return __builtin_shufflevector(c0, c1, 0, 1, 2, 3, 8, 9, 10, 11) +
         __builtin_shufflevector(c0, c1, 4, 5, 6, 7, 12, 13, 14, 15);
}

// e^x lane by lane for x <= 0 (a logit minus the running max), within 2 ulp: 2^n · p(r) with
// n = round(x · log2 e), r = x − n · ln 2 (ln 2 in two parts) and Cephes' degree-6 polynomial for
// expf. Below −87 (−inf included) it is 0: there e^x < 2^−125, nothing beside the max's 1.
[[gnu::always_inline]] inline V8 exp8(const V8& x) noexcept {
  constexpr float kRound = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer, in the low bits
  const V8 t = x * 1.44269504088896341f + kRound;
  const V8 n = t - kRound;
  const V8 r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  V8 p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const V8 y = (p * (r * r) + r) + 1.0f;
  const I8 bits = ((I8)t - 0x4B400000 + 127) << 23;  // vector casts keep the bits: 2^n
  const V8 scaled = y * (V8)bits;
  return x < -87.0f ? V8{} : scaled;
}

// Up to 8 rows (float32, K of every KV head then V) into the running state, per query head: the
// logits of the block, one new max (and one shrink of what was summed) per block, the weights by
// exp8, and acc = acc · shrink + Σ_r p_r · v_r, read and written once per block.
[[gnu::always_inline]] inline void add_block(AttentionState& s, const float* const* rows, std::uint32_t n) noexcept {
  for (std::uint32_t h = 0; h < s.q_heads; ++h) {
    for (std::uint32_t r = h; r < s.next_rows; r += s.q_heads) {
      for (std::size_t line = 0; line < s.row_bytes; line += 64) __builtin_prefetch(s.next[r] + line);
    }
    const std::size_t kv = std::size_t{h / s.group} * s.head_dim;
    const float* q = s.q + std::size_t{h} * s.head_dim;
    V8 dots[8] = {};
    for (std::uint32_t r = 0; r < n; ++r) dots[r] = dot_lanes(q, rows[r] + kv, s.head_dim);
    float logits[8];
    store8(logits, sum_lanes(dots) * s.scale);
    float top = s.max[h];
    for (std::uint32_t r = 0; r < 8; ++r) {
      if (r >= n) logits[r] = kMinusInf;
      top = logits[r] > top ? logits[r] : top;
    }
    if (s.logits != nullptr) {
      for (std::uint32_t r = 0; r < n; ++r) s.logits[h * s.logits_stride + s.row + r] = logits[r];
    }
    const float shrink = top > s.max[h] ? std::exp(s.max[h] - top) : 1.0f;  // e^−inf = 0 before any row
    s.max[h] = top;
    float p[8];
    store8(p, exp8(load8(logits) - top));
    s.sum[h] = s.sum[h] * shrink + (((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7])));
    float* acc = s.acc + std::size_t{h} * s.head_dim;
    std::uint32_t d = 0;
    for (; d + 8 <= s.head_dim; d += 8) {
      V8 a = load8(acc + d) * shrink;
      for (std::uint32_t r = 0; r < n; ++r) a += load8(rows[r] + s.half + kv + d) * p[r];
      store8(acc + d, a);
    }
    for (; d < s.head_dim; ++d) {
      float a = acc[d] * shrink;
      for (std::uint32_t r = 0; r < n; ++r) a += rows[r][s.half + kv + d] * p[r];
      acc[d] = a;
    }
  }
  s.row += n;
}

[[gnu::always_inline]] inline void to_probs(float* values, std::size_t n, float lse) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) store8(values + i, exp8(load8(values + i) - lse));
  if (i < n) {
    float tail[8];
    for (std::size_t j = 0; j < 8; ++j) tail[j] = i + j < n ? values[i + j] : lse;
    store8(tail, exp8(load8(tail) - lse));
    std::memcpy(values + i, tail, (n - i) * sizeof(float));
  }
}

void add_block_baseline(AttentionState& s, const float* const* rows, std::uint32_t n) noexcept {
  add_block(s, rows, n);
}

void to_probs_baseline(float* values, std::size_t n, float lse) noexcept { to_probs(values, n, lse); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
[[gnu::target("avx2")]] void add_block_avx2(AttentionState& s, const float* const* rows, std::uint32_t n) noexcept {
  add_block(s, rows, n);
}

[[gnu::target("avx2")]] void to_probs_avx2(float* values, std::size_t n, float lse) noexcept {
  to_probs(values, n, lse);
}
#endif

}  // namespace

AddBlock baseline_add_block() noexcept { return add_block_baseline; }

AddBlock avx2_add_block() noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? add_block_avx2 : nullptr;
#else
  return nullptr;
#endif
}

AddBlock default_add_block() noexcept {
  static const AddBlock chosen = avx2_add_block() != nullptr ? avx2_add_block() : baseline_add_block();
  return chosen;
}

ToProbs baseline_to_probs() noexcept { return to_probs_baseline; }

ToProbs avx2_to_probs() noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? to_probs_avx2 : nullptr;
#else
  return nullptr;
#endif
}

ToProbs default_to_probs() noexcept {
  static const ToProbs chosen = avx2_to_probs() != nullptr ? avx2_to_probs() : baseline_to_probs();
  return chosen;
}

}  // namespace detail

Status validate_host_attention(const KvLayout& layout, const HostQuery& query, const HostPartial& out,
                               std::size_t rows) {
  const auto bad = [](const std::string& message) {
    return make_error(Errc::kInvalidArgument, "attend_host: " + message);
  };
  if (query.q == nullptr || out.out == nullptr || out.lse == nullptr) return bad("the query, out or lse is null");
  if (layout.num_kv_heads == 0 || query.q_heads == 0 || query.q_heads % layout.num_kv_heads != 0) {
    return bad(std::to_string(query.q_heads) + " query heads are not a multiple of " +
               std::to_string(layout.num_kv_heads) + " KV heads");
  }
  if (query.head_dim != layout.head_dim) {
    return bad("head_dim " + std::to_string(query.head_dim) + " is not the cache's " + std::to_string(layout.head_dim));
  }
  if (!std::isfinite(query.scale)) return bad("the scale is not finite");
  if (out.probs != nullptr && out.probs_stride < rows) {
    return bad("probs_stride " + std::to_string(out.probs_stride) + " < " + std::to_string(rows) + " rows");
  }
  return {};
}

PartialAttention::PartialAttention(const KvLayout& layout, const HostQuery& query, const HostPartial& out)
    : dtype_(layout.dtype),
      kv_heads_(layout.num_kv_heads),
      head_dim_(layout.head_dim),
      group_(query.q_heads / layout.num_kv_heads),
      query_(query),
      out_(out),
      max_(query.q_heads, detail::kMinusInf),
      sum_(query.q_heads, 0.0f),
      acc_(std::size_t{query.q_heads} * layout.head_dim, 0.0f) {
  if (dtype_ != KvDtype::kF32) row_.resize(kBlockRows * 2 * std::size_t{kv_heads_} * head_dim_);
}

void PartialAttention::add(std::span<const std::byte* const> rows) noexcept {
  const std::size_t half = std::size_t{kv_heads_} * head_dim_;
  const std::size_t row_bytes = 2 * half * dtype_bytes(dtype_);
  detail::AttentionState state{query_.q,   query_.scale, query_.q_heads, group_,      head_dim_,
                               half,       max_.data(),  sum_.data(),    acc_.data(), out_.probs,
                               out_.probs_stride, rows_, nullptr, 0, row_bytes};
  const detail::AddBlock add_block = detail::default_add_block();
  const float* block[kBlockRows];
  for (std::size_t first = 0; first < rows.size(); first += kBlockRows) {
    const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(kBlockRows, rows.size() - first));
    for (std::uint32_t r = 0; r < n; ++r) {
      if (dtype_ == KvDtype::kF32) {
        block[r] = reinterpret_cast<const float*>(rows[first + r]);
      } else {
        float* converted = row_.data() + r * 2 * half;
        to_f32(dtype_, rows[first + r], converted, 2 * half);
        block[r] = converted;
      }
    }
    // The next block's rows toward the cache while this one computes (host rows are scattered
    // over the pool, where the hardware prefetchers do not follow); add_block spreads them.
    state.next = rows.data() + first + n;
    state.next_rows = static_cast<std::uint32_t>(std::min<std::size_t>(kBlockRows, rows.size() - first - n));
    add_block(state, block, n);
  }
  rows_ = state.row;
}

void PartialAttention::finish() const noexcept {
  for (std::uint32_t h = 0; h < query_.q_heads; ++h) {
    float* out = out_.out + std::size_t{h} * head_dim_;
    const float* acc = acc_.data() + std::size_t{h} * head_dim_;
    if (sum_[h] == 0.0f) {  // no rows (or every logit −inf)
      out_.lse[h] = detail::kMinusInf;
      for (std::uint32_t d = 0; d < head_dim_; ++d) out[d] = 0.0f;
      continue;
    }
    out_.lse[h] = max_[h] + std::log(sum_[h]);
    for (std::uint32_t d = 0; d < head_dim_; ++d) out[d] = acc[d] / sum_[h];
    if (out_.probs != nullptr) detail::default_to_probs()(out_.probs + h * out_.probs_stride, rows_, out_.lse[h]);
  }
}

}  // namespace kvtier::kernels
