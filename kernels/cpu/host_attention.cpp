// PartialAttention (host_attention.hpp): online softmax over rows in host memory. The per-row
// loop is written once over 8-lane vectors and built per instruction set (host_attention_rows.hpp).
#include "kvtier/kernels/host_attention.hpp"

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

[[gnu::always_inline]] inline V8 load8(const float* p) noexcept {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

[[gnu::always_inline]] inline void store8(float* p, V8 v) noexcept { std::memcpy(p, &v, sizeof v); }

// q · k: eight lanes, then the lanes added in a fixed tree; tail elements into lane i % 8.
[[gnu::always_inline]] inline float dot(const float* q, const float* k, std::uint32_t n) noexcept {
  V8 acc = {};
  std::uint32_t i = 0;
  for (; i + 8 <= n; i += 8) acc += load8(q + i) * load8(k + i);
  float l[8];
  store8(l, acc);
  for (; i < n; ++i) l[i % 8] += q[i] * k[i];
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// acc = acc * shrink + p * v, element by element.
[[gnu::always_inline]] inline void accumulate(float* acc, float shrink, float p, const float* v,
                                              std::uint32_t n) noexcept {
  std::uint32_t i = 0;
  for (; i + 8 <= n; i += 8) store8(acc + i, load8(acc + i) * shrink + load8(v + i) * p);
  for (; i < n; ++i) acc[i] = acc[i] * shrink + v[i] * p;
}

[[gnu::always_inline]] inline void add_row(AttentionState& s, const float* row) noexcept {
  for (std::uint32_t h = 0; h < s.q_heads; ++h) {
    const std::size_t kv = std::size_t{h / s.group} * s.head_dim;
    const float logit = s.scale * dot(s.q + std::size_t{h} * s.head_dim, row + kv, s.head_dim);
    if (s.logits != nullptr) s.logits[h * s.logits_stride + s.row] = logit;
    float shrink = 1.0f;
    if (logit > s.max[h]) {  // a new maximum: what was summed against the old one shrinks
      shrink = std::exp(s.max[h] - logit);
      s.max[h] = logit;
    }
    const float p = std::exp(logit - s.max[h]);
    s.sum[h] = s.sum[h] * shrink + p;
    accumulate(s.acc + std::size_t{h} * s.head_dim, shrink, p, row + s.half + kv, s.head_dim);
  }
}

void add_row_baseline(AttentionState& s, const float* row) noexcept { add_row(s, row); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
[[gnu::target("avx2")]] void add_row_avx2(AttentionState& s, const float* row) noexcept { add_row(s, row); }
#endif

}  // namespace

AddRow baseline_add_row() noexcept { return add_row_baseline; }

AddRow avx2_add_row() noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? add_row_avx2 : nullptr;
#else
  return nullptr;
#endif
}

AddRow default_add_row() noexcept {
  static const AddRow chosen = avx2_add_row() != nullptr ? avx2_add_row() : baseline_add_row();
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
  if (out.logits != nullptr && out.logits_stride < rows) {
    return bad("logits_stride " + std::to_string(out.logits_stride) + " < " + std::to_string(rows) + " rows");
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
  if (dtype_ != KvDtype::kF32) row_.resize(2 * std::size_t{kv_heads_} * head_dim_);
}

void PartialAttention::add(const std::byte* row) noexcept {
  const std::size_t half = std::size_t{kv_heads_} * head_dim_;
  const float* values = reinterpret_cast<const float*>(row);
  if (dtype_ != KvDtype::kF32) {
    to_f32(dtype_, row, row_.data(), 2 * half);
    values = row_.data();
  }
  detail::AttentionState state{query_.q,   query_.scale, query_.q_heads, group_,         head_dim_,
                               half,       max_.data(),  sum_.data(),    acc_.data(),    out_.logits,
                               out_.logits_stride, rows_};
  detail::default_add_row()(state, values);
  ++rows_;
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
  }
}

}  // namespace kvtier::kernels
