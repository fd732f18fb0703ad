// attend_rows (host_attention.hpp): chunks of rows, each an online softmax over blocks of 8, on
// the worker threads; the loops over a block are written once over 8-lane vectors and built per
// instruction set (host_attention_rows.hpp).
#include "kvtier/kernels/host_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "host_attention_rows.hpp"
#include "kvtier/kernels/quantize.hpp"
#include "worker_pool.hpp"

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

// q · k_r for the 8 rows of a block as 8 lane sums each (lane j: elements j, j + 8, ...; a tail of
// n % 8 elements into lanes 0..), one query chunk against every row's: 8 independent sums, each
// in a register (spelled out: an array of them would live in memory).
[[gnu::always_inline]] inline void dot_lanes(const float* q, const float* const* k, std::uint32_t n, V8* out) noexcept {
  V8 d0 = {}, d1 = {}, d2 = {}, d3 = {}, d4 = {}, d5 = {}, d6 = {}, d7 = {};
  const auto step = [&](const V8& qc, std::uint32_t i) {
    d0 += qc * load8(k[0] + i);
    d1 += qc * load8(k[1] + i);
    d2 += qc * load8(k[2] + i);
    d3 += qc * load8(k[3] + i);
    d4 += qc * load8(k[4] + i);
    d5 += qc * load8(k[5] + i);
    d6 += qc * load8(k[6] + i);
    d7 += qc * load8(k[7] + i);
  };
  std::uint32_t i = 0;
  for (; i + 8 <= n; i += 8) step(load8(q + i), i);
  out[0] = d0, out[1] = d1, out[2] = d2, out[3] = d3, out[4] = d4, out[5] = d5, out[6] = d6, out[7] = d7;
  if (i < n) {
    float qt[8] = {};
    std::memcpy(qt, q + i, (n - i) * sizeof(float));
    const V8 qc = load8(qt);
    for (std::uint32_t r = 0; r < 8; ++r) {
      float kt[8] = {};
      std::memcpy(kt, k[r] + i, (n - i) * sizeof(float));
      out[r] += qc * load8(kt);
    }
  }
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

// q · k_r for the 8 rows of a dim-major block: lane r sums q_e · k[e · stride + r] over e, in four
// interleaved sums (e mod 4) added at the end.
[[gnu::always_inline]] inline V8 dot_dim_major(const float* q, const float* k, std::size_t stride,
                                               std::uint32_t n) noexcept {
  V8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  std::uint32_t e = 0;
  for (; e + 4 <= n; e += 4) {
    a0 += load8(k + e * stride) * q[e];
    a1 += load8(k + (e + 1) * stride) * q[e + 1];
    a2 += load8(k + (e + 2) * stride) * q[e + 2];
    a3 += load8(k + (e + 3) * stride) * q[e + 3];
  }
  for (; e < n; ++e) a0 += load8(k + e * stride) * q[e];
  return (a0 + a1) + (a2 + a3);
}

// e^x lane by lane for x <= 0 (a logit minus the running max), within one ulp of exp
// (host_attention_test.cpp): 2^n · p(r) with n = round(x · log2 e), r = x − n · ln 2 (ln 2 in two
// parts) and Cephes' degree-6 polynomial for expf. Below −87 (−inf included) it is 0: there e^x < 2^−125, nothing beside the max's 1.
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

// Up to 8 rows into the running state, per query head: the logits of the block (the 8 dot
// products reduced together), one new max (and one shrink of what was summed) per block, the
// weights by exp8, and acc = acc · shrink + Σ_r p_r · v_r, read and written once per block.
[[gnu::always_inline]] inline void add_block(AttentionState& s, const FloatRows& rows, std::uint32_t n) noexcept {
  for (std::uint32_t h = 0; h < s.q_heads; ++h) {
    for (std::uint32_t r = h; r < s.next_rows; r += s.q_heads) {
      for (std::uint32_t head = 0; head < s.kv_heads; ++head) {
        for (std::size_t line = 0; line < s.head_bytes; line += 64) {
          __builtin_prefetch(s.next[r].k + head * s.next[r].head_stride + line);
          __builtin_prefetch(s.next[r].v + head * s.next[r].head_stride + line);
        }
      }
    }
    const std::size_t kv = h / s.group;
    const float* q = s.q + std::size_t{h} * s.head_dim;
    const float* k[8];
    const float* v[8];
    for (std::uint32_t r = 0; r < 8; ++r) {  // a short block's missing rows read q, their logits unused
      k[r] = r < n ? rows.k[r] + kv * rows.stride[r] : q;
      v[r] = r < n ? rows.v[r] + kv * rows.stride[r] : nullptr;
    }
    float logits[8];
    if (rows.dim_stride != 0) {
      store8(logits, dot_dim_major(q, k[0], rows.dim_stride, s.head_dim) * s.scale);
    } else {
      V8 dots[8] = {};
      dot_lanes(q, k, s.head_dim, dots);
      store8(logits, sum_lanes(dots) * s.scale);
    }
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
    // Four chunks of the accumulator at a time: four independent sums over the rows.
    float* acc = s.acc + std::size_t{h} * s.head_dim;
    std::uint32_t d = 0;
    for (; d + 32 <= s.head_dim; d += 32) {
      V8 a0 = load8(acc + d) * shrink, a1 = load8(acc + d + 8) * shrink;
      V8 a2 = load8(acc + d + 16) * shrink, a3 = load8(acc + d + 24) * shrink;
      for (std::uint32_t r = 0; r < n; ++r) {
        const float* vr = v[r] + d;
        a0 += load8(vr) * p[r];
        a1 += load8(vr + 8) * p[r];
        a2 += load8(vr + 16) * p[r];
        a3 += load8(vr + 24) * p[r];
      }
      store8(acc + d, a0);
      store8(acc + d + 8, a1);
      store8(acc + d + 16, a2);
      store8(acc + d + 24, a3);
    }
    for (; d + 8 <= s.head_dim; d += 8) {
      V8 a = load8(acc + d) * shrink;
      for (std::uint32_t r = 0; r < n; ++r) a += load8(v[r] + d) * p[r];
      store8(acc + d, a);
    }
    for (; d < s.head_dim; ++d) {
      float a = acc[d] * shrink;
      for (std::uint32_t r = 0; r < n; ++r) a += v[r][d] * p[r];
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

void add_block_baseline(AttentionState& s, const FloatRows& rows, std::uint32_t n) noexcept { add_block(s, rows, n); }
void to_probs_baseline(float* values, std::size_t n, float lse) noexcept { to_probs(values, n, lse); }
constexpr AttentionLoops kBaseline{add_block_baseline, to_probs_baseline};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
[[gnu::target("avx2")]] void add_block_avx2(AttentionState& s, const FloatRows& rows, std::uint32_t n) noexcept {
  add_block(s, rows, n);
}
[[gnu::target("avx2")]] void to_probs_avx2(float* values, std::size_t n, float lse) noexcept {
  to_probs(values, n, lse);
}
constexpr AttentionLoops kAvx2{add_block_avx2, to_probs_avx2};
#endif

// Rows from `first` that form one block: up to 8; with dim-major keys, up to 8 consecutive tokens
// of one layout row (their keys' element 0 one element apart, the same head stride).
std::uint32_t block_rows(std::span<const AttendRow> rows, std::size_t first, bool dim_major, std::size_t es) {
  const std::size_t most = std::min<std::size_t>(8, rows.size() - first);
  if (!dim_major) return static_cast<std::uint32_t>(most);
  std::uint32_t n = 1;
  while (n < most && rows[first + n].k == rows[first].k + n * es &&
         rows[first + n].head_stride == rows[first].head_stride) {
    ++n;
  }
  return n;
}

// One chunk's rows, in blocks of up to 8, converted to float32 token-major rows where the dtype is
// not float32 or a dim-major block is short (into `scratch`, 8 rows of K and V).
void run_chunk(const KvLayout& layout, const AttentionLoops& loops, AttentionState& s, std::span<const AttendRow> rows,
               bool dim_major, float* scratch) {
  const std::size_t es = dtype_bytes(layout.dtype);
  const std::uint32_t kv_heads = layout.num_kv_heads, dim = s.head_dim;
  const std::size_t step = dim_major ? layout.head_dim / dim : 1;  // elements between a key's elements
  const bool f32 = layout.dtype == KvDtype::kF32;
  for (std::size_t first = 0; first < rows.size();) {
    const std::uint32_t n = block_rows(rows, first, dim_major, es);
    s.next = rows.data() + first + n;
    s.next_rows = static_cast<std::uint32_t>(std::min<std::size_t>(8, rows.size() - first - n));
    FloatRows block{};
    if (f32 && dim_major && n == 8) block.dim_stride = step;
    for (std::uint32_t r = 0; r < n; ++r) {
      const AttendRow& row = rows[first + r];
      if (f32 && (!dim_major || n == 8)) {
        block.k[r] = reinterpret_cast<const float*>(row.k);
        block.v[r] = reinterpret_cast<const float*>(row.v);
        block.stride[r] = row.head_stride / es;
        continue;
      }
      float* k = scratch + std::size_t{r} * 2 * kv_heads * dim;
      float* v = k + std::size_t{kv_heads} * dim;
      for (std::uint32_t h = 0; h < kv_heads; ++h) {
        const std::byte* key = row.k + h * row.head_stride;
        float* to = k + std::size_t{h} * dim;
        if (step == 1) {
          to_f32(layout.dtype, key, to, dim);
        } else if (f32) {  // a short dim-major block: gathered
          const auto* from = reinterpret_cast<const float*>(key);
          for (std::uint32_t e = 0; e < dim; ++e) to[e] = from[e * step];
        } else {
          for (std::uint32_t e = 0; e < dim; ++e) to_f32(layout.dtype, key + e * step * es, to + e, 1);
        }
        to_f32(layout.dtype, row.v + h * row.head_stride, v + std::size_t{h} * dim, dim);
      }
      block.k[r] = k;
      block.v[r] = v;
      block.stride[r] = dim;
    }
    loops.add_block(s, block, n);
    first += n;
  }
}

}  // namespace

const AttentionLoops& baseline_attention_loops() noexcept { return kBaseline; }

const AttentionLoops* avx2_attention_loops() noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? &kAvx2 : nullptr;
#else
  return nullptr;
#endif
}

const AttentionLoops& default_attention_loops() noexcept {
  static const AttentionLoops& chosen = avx2_attention_loops() != nullptr ? *avx2_attention_loops() : kBaseline;
  return chosen;
}

}  // namespace detail

Status validate_host_attention(const KvLayout& layout, const HostQuery& query, const AttendOutput& out,
                               std::size_t rows) {
  const auto bad = [](const std::string& message) {
    return make_error(Errc::kInvalidArgument, "attend: " + message);
  };
  if (query.q == nullptr || out.out == nullptr || out.lse == nullptr) return bad("the query, out or lse is null");
  if (layout.num_kv_heads == 0 || query.q_heads == 0 || query.q_heads % layout.num_kv_heads != 0) {
    return bad(std::to_string(query.q_heads) + " query heads are not a multiple of " +
               std::to_string(layout.num_kv_heads) + " KV heads");
  }
  if (tokens_per_row(layout, query) == 0) {
    return bad("head_dim " + std::to_string(query.head_dim) + " does not divide the cache's " +
               std::to_string(layout.head_dim));
  }
  if (!std::isfinite(query.scale)) return bad("the scale is not finite");
  if (out.probs != nullptr && out.probs_stride < rows) {
    return bad("probs_stride " + std::to_string(out.probs_stride) + " < " + std::to_string(rows) + " rows");
  }
  if (out.scores != nullptr && out.scores_count != rows) {
    return bad("scores has " + std::to_string(out.scores_count) + " entries for " + std::to_string(rows) + " rows");
  }
  return {};
}

void attend_rows(const KvLayout& layout, const HostQuery& query, std::span<const AttendRow> rows,
                 const AttendOutput& out) {
  const std::uint32_t hq = query.q_heads, dim = query.head_dim;
  const std::size_t n = rows.size(), chunks = (n + kAttendChunkRows - 1) / kAttendChunkRows;
  const detail::AttentionLoops& loops = detail::default_attention_loops();
  // Logits, turned into probabilities at the end: the caller's probs, else our own when scores
  // are wanted.
  std::vector<float> own_logits;
  float* logits = out.probs;
  std::size_t stride = out.probs_stride;
  if (logits == nullptr && out.scores != nullptr) {
    own_logits.resize(std::size_t{hq} * n);
    logits = own_logits.data();
    stride = n;
  }
  // Per chunk: max [hq], sum [hq], acc [hq, dim], conversion scratch [8 rows of K and V].
  const bool converts = layout.dtype != KvDtype::kF32 || query.keys_dim_major;
  const std::size_t scratch = converts ? 16 * std::size_t{layout.num_kv_heads} * dim : 0;
  const std::size_t per_chunk = 2 * std::size_t{hq} + std::size_t{hq} * dim + scratch;
  std::vector<float> states(chunks * per_chunk);
  detail::WorkerPool::shared().run(chunks, [&](std::size_t c) {
    float* st = states.data() + c * per_chunk;
    std::fill(st, st + hq, detail::kMinusInf);
    const std::size_t first = c * kAttendChunkRows;
    detail::AttentionState s{query.q, query.scale, hq,     hq / layout.num_kv_heads, dim,
                             st,      st + hq,     st + 2 * hq, logits,             stride,
                             first,   nullptr,     0,      layout.num_kv_heads,     dim * dtype_bytes(layout.dtype)};
    detail::run_chunk(layout, loops, s, rows.subspan(first, std::min(kAttendChunkRows, n - first)),
                      query.keys_dim_major, st + per_chunk - scratch);
  });
  // Merge the chunks in order: m = max, sum and acc rescaled to it.
  for (std::uint32_t h = 0; h < hq; ++h) {
    float top = detail::kMinusInf;
    for (std::size_t c = 0; c < chunks; ++c) top = std::max(top, states[c * per_chunk + h]);
    float sum = 0.0f;
    float* o = out.out + std::size_t{h} * dim;
    std::fill(o, o + dim, 0.0f);
    for (std::size_t c = 0; c < chunks; ++c) {
      const float* st = states.data() + c * per_chunk;
      if (st[hq + h] == 0.0f) continue;  // nothing summed: every logit of the chunk was −inf
      const float w = std::exp(st[h] - top);
      sum += st[hq + h] * w;
      const float* acc = st + 2 * hq + std::size_t{h} * dim;
      for (std::uint32_t d = 0; d < dim; ++d) o[d] += acc[d] * w;
    }
    if (sum == 0.0f) {  // no rows
      out.lse[h] = detail::kMinusInf;
      continue;
    }
    out.lse[h] = top + std::log(sum);
    for (std::uint32_t d = 0; d < dim; ++d) o[d] /= sum;
  }
  if (logits == nullptr || n == 0) return;
  detail::WorkerPool::shared().run(chunks, [&](std::size_t c) {
    const std::size_t first = c * kAttendChunkRows, count = std::min(kAttendChunkRows, n - first);
    for (std::uint32_t h = 0; h < hq; ++h) loops.to_probs(logits + h * stride + first, count, out.lse[h]);
    if (out.scores == nullptr) return;
    for (std::uint32_t h = 0; h < hq; ++h) {
      const float* p = logits + h * stride + first;
      for (std::size_t i = 0; i < count; ++i) out.scores[first + i] += p[i];
    }
  });
}

}  // namespace kvtier::kernels
