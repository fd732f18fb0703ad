// PartialAttention (host_attention.hpp): online softmax over rows in host memory.
#include "kvtier/kernels/host_attention.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "kvtier/kernels/quantize.hpp"

namespace kvtier::kernels {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// q · k over n floats in eight interleaved partial sums added in a fixed tree: the same bits on
// every machine, and a loop the compiler vectorizes without reassociating.
float dot(const float* q, const float* k, std::uint32_t n) noexcept {
  float lanes[8] = {};
  std::uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (std::uint32_t j = 0; j < 8; ++j) lanes[j] += q[i + j] * k[i + j];
  }
  for (; i < n; ++i) lanes[i % 8] += q[i] * k[i];
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

}  // namespace

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
      max_(query.q_heads, kMinusInf),
      sum_(query.q_heads, 0.0f),
      acc_(std::size_t{query.q_heads} * layout.head_dim, 0.0f) {
  if (dtype_ != KvDtype::kF32) row_.resize(2 * std::size_t{kv_heads_} * head_dim_);
}

void PartialAttention::add(const std::byte* row) noexcept {
  const std::size_t half = std::size_t{kv_heads_} * head_dim_;
  const float* values = nullptr;
  if (dtype_ == KvDtype::kF32) {
    values = reinterpret_cast<const float*>(row);
  } else {
    to_f32(dtype_, row, row_.data(), 2 * half);
    values = row_.data();
  }
  for (std::uint32_t h = 0; h < query_.q_heads; ++h) {
    const std::uint32_t kv = h / group_;
    const float* k = values + std::size_t{kv} * head_dim_;
    const float* v = values + half + std::size_t{kv} * head_dim_;
    const float s = query_.scale * dot(query_.q + std::size_t{h} * head_dim_, k, head_dim_);
    if (out_.logits != nullptr) out_.logits[h * out_.logits_stride + rows_] = s;
    float* acc = acc_.data() + std::size_t{h} * head_dim_;
    if (s > max_[h]) {  // a new maximum: rescale what was summed against the old one
      const float shrink = std::exp(max_[h] - s);
      sum_[h] *= shrink;
      for (std::uint32_t d = 0; d < head_dim_; ++d) acc[d] *= shrink;
      max_[h] = s;
    }
    const float p = std::exp(s - max_[h]);
    sum_[h] += p;
    for (std::uint32_t d = 0; d < head_dim_; ++d) acc[d] += p * v[d];
  }
  ++rows_;
}

void PartialAttention::finish() const noexcept {
  for (std::uint32_t h = 0; h < query_.q_heads; ++h) {
    float* out = out_.out + std::size_t{h} * head_dim_;
    const float* acc = acc_.data() + std::size_t{h} * head_dim_;
    if (sum_[h] == 0.0f) {  // no rows (or every logit −inf)
      out_.lse[h] = kMinusInf;
      for (std::uint32_t d = 0; d < head_dim_; ++d) out[d] = 0.0f;
      continue;
    }
    out_.lse[h] = max_[h] + std::log(sum_[h]);
    for (std::uint32_t d = 0; d < head_dim_; ++d) out[d] = acc[d] / sum_[h];
  }
}

}  // namespace kvtier::kernels
