// TokenFeatures: storage and validation of the optional per-token policy inputs.
#include "kvtier/tier/token_features.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <string>

#include "score_loops.hpp"

namespace kvtier::tier {
namespace {

std::string fmt_value(float value) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(value));
  return buf;
}

Status unused(PolicyKind policy, std::string_view what) {
  return make_error(Errc::kBadState, "policy " + std::string(policy_name(policy)) +
                                         " does not use " + std::string(what));
}

}  // namespace

TokenFeatures::TokenFeatures(const TierParams& params, std::uint32_t sum_first,
                             std::uint32_t max_tokens)
    : use_recent_(policy_traits(params.policy).uses_recent_attention),
      use_ranges_(policy_traits(params.policy).uses_value_ranges),
      use_digests_(policy_traits(params.policy).uses_key_digests),
      policy_(params.policy),
      sum_first_(sum_first),
      // decide()'s candidate mask: the prototype ranks only T0, the other modes every live tier.
      count_mask_(params.mode == EvictionMode::kPaperPrototype
                      ? std::uint8_t{1u << tier_index(Tier::kT0)}
                      : static_cast<std::uint8_t>((1u << tier_index(Tier::kT0)) |
                                                  (1u << tier_index(Tier::kT1)) |
                                                  (1u << tier_index(Tier::kT2)))),
      // |code·w| <= 2^shift + 64 per row (|code|·inv_norm <= 1), so max_tokens rows stay below
      // 2^63.
      sum_shift_(62 - std::bit_width(max_tokens)) {
  const std::uint32_t window = effective_recent_window(params);
  rho_ = window > 0 ? static_cast<float>(1.0 - 1.0 / static_cast<double>(window)) : 0.0f;
}

void TokenFeatures::resize(std::uint32_t length) {
  if (length <= length_) return;
  length_ = length;
  if (use_recent_) recent_.resize(length, 0.0f);
  if (use_ranges_) ranges_.resize(length, 0.0f);
  if (use_digests_ && digest_dim_ != 0) {
    digest_codes_.resize(std::size_t{length} * digest_dim_, 0);
    digest_inv_norms_.resize(length, 0.0f);
  }
}

void TokenFeatures::apply_pending_decay() noexcept {
  if (pending_steps_ == 0) return;
  const auto factor = static_cast<float>(std::pow(static_cast<double>(rho_), pending_steps_));
  pending_steps_ = 0;
  for (float& r : recent_) r *= factor;  // T3 entries are 0 and stay 0
}

void TokenFeatures::add_recent(std::uint32_t first, std::span<const float> values,
                               std::span<const Tier> tiers) {
  if (!use_recent_ || values.empty()) return;
  apply_pending_decay();
  detail::add_unless_dropped(recent_.data() + first, tiers.data() + first, values.data(),
                             values.size());
}

void TokenFeatures::end_step() noexcept {
  if (use_recent_) ++pending_steps_;
}

Status TokenFeatures::check_value_ranges(std::uint32_t first,
                                         std::span<const float> ranges) const {
  if (!use_ranges_) return unused(policy_, "value ranges");
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const float v = ranges[i];
    if (!std::isfinite(v) || v < 0.0f) {
      return make_error(Errc::kInvalidArgument, "value range at position " +
                                                    std::to_string(first + i) +
                                                    " must be finite and >= 0, got " +
                                                    fmt_value(v));
    }
  }
  return {};
}

Status TokenFeatures::set_value_ranges(std::uint32_t first, std::span<const float> ranges) {
  if (auto status = check_value_ranges(first, ranges); !status) return status;
  std::copy(ranges.begin(), ranges.end(), ranges_.begin() + first);
  return {};
}

Status TokenFeatures::check_key_digests(std::uint32_t first, std::span<const float> keys,
                                        std::uint32_t dim) const {
  if (!use_digests_) return unused(policy_, "key digests");
  if (dim == 0 || dim > kMaxDigestDim) {
    return make_error(Errc::kInvalidArgument, "key digest dim must be in [1, " +
                                                  std::to_string(kMaxDigestDim) + "], got " +
                                                  std::to_string(dim));
  }
  if (digest_dim_ != 0 && dim != digest_dim_) {
    return make_error(Errc::kInvalidArgument, "key digest dim " + std::to_string(dim) +
                                                  " differs from this sequence's " +
                                                  std::to_string(digest_dim_));
  }
  if (keys.size() % dim != 0) {
    return make_error(Errc::kInvalidArgument, "key digests: " + std::to_string(keys.size()) +
                                                  " values are not a multiple of dim " +
                                                  std::to_string(dim));
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!std::isfinite(keys[i])) {
      return make_error(Errc::kInvalidArgument, "key digest at position " +
                                                    std::to_string(first + i / dim) +
                                                    " has a non-finite component " +
                                                    fmt_value(keys[i]));
    }
  }
  return {};
}

void TokenFeatures::add_row(std::vector<std::int64_t>& sum, std::uint32_t position,
                            std::int64_t sign) const {
  const float inv = digest_inv_norms_[position];
  if (inv == 0.0f) return;  // a zero row adds nothing
  const std::int64_t w = sign * std::llround(std::ldexp(static_cast<double>(inv), sum_shift_));
  const std::int8_t* q = digest_codes_.data() + std::size_t{position} * digest_dim_;
  for (std::uint32_t d = 0; d < digest_dim_; ++d) sum[d] += w * q[d];
}

Status TokenFeatures::set_key_digests(std::uint32_t first, std::span<const float> keys,
                                      std::uint32_t dim, std::span<const Tier> tiers) {
  if (auto status = check_key_digests(first, keys, dim); !status) return status;
  if (digest_dim_ == 0) {
    digest_dim_ = dim;
    digest_codes_.assign(std::size_t{length_} * dim, 0);
    digest_inv_norms_.assign(length_, 0.0f);
    digest_sum_.assign(dim, 0);
  }
  const std::size_t rows = keys.size() / dim;
  for (std::size_t r = 0; r < rows; ++r) {
    const auto position = static_cast<std::uint32_t>(first + r);
    const bool in_sum = counted(position, tiers[position]);
    if (in_sum) add_row(digest_sum_, position, -1);  // the row it replaces
    const float* x = keys.data() + r * dim;
    float max_abs = 0.0f;
    for (std::uint32_t d = 0; d < dim; ++d) max_abs = std::max(max_abs, std::fabs(x[d]));
    std::int8_t* q = digest_codes_.data() + (first + r) * dim;
    std::int64_t norm2 = 0;
    for (std::uint32_t d = 0; d < dim; ++d) {
      // Cosine is scale-free, so each row gets its own scale; only the int8 row is kept.
      const float scaled = max_abs > 0.0f ? x[d] * (127.0f / max_abs) : 0.0f;
      const auto code = static_cast<std::int8_t>(std::clamp(std::lround(scaled), -127L, 127L));
      q[d] = code;
      norm2 += std::int64_t{code} * code;
    }
    digest_inv_norms_[first + r] =
        norm2 > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(norm2))) : 0.0f;
    if (in_sum) add_row(digest_sum_, position, +1);
  }
  return {};
}

void TokenFeatures::moved(std::uint32_t position, Tier from, Tier to) noexcept {
  if (use_digests_ && digest_dim_ != 0) {
    const bool was = counted(position, from);
    const bool is = to != Tier::kT3 && counted(position, to);
    if (was != is) add_row(digest_sum_, position, is ? +1 : -1);
  }
  if (to != Tier::kT3) return;
  if (use_recent_) recent_[position] = 0.0f;
  if (use_ranges_) ranges_[position] = 0.0f;
  if (use_digests_ && digest_dim_ != 0) {
    std::fill_n(digest_codes_.begin() + std::size_t{position} * digest_dim_, digest_dim_, 0);
    digest_inv_norms_[position] = 0.0f;
  }
}

std::span<const float> TokenFeatures::recent(std::uint32_t first,
                                             std::uint32_t size) const noexcept {
  if (!use_recent_) return {};
  return {recent_.data() + first, size};
}

std::span<const float> TokenFeatures::value_ranges(std::uint32_t first,
                                                   std::uint32_t size) const noexcept {
  if (!use_ranges_) return {};
  return {ranges_.data() + first, size};
}

KeyDigestView TokenFeatures::digests(std::uint32_t first, std::uint32_t size) const noexcept {
  if (!use_digests_ || digest_dim_ == 0) return {};
  return {{digest_codes_.data() + std::size_t{first} * digest_dim_, std::size_t{size} * digest_dim_},
          {digest_inv_norms_.data() + first, size},
          digest_dim_};
}

KeyDigestView TokenFeatures::ranked_digests(std::uint32_t first, std::uint32_t last,
                                            std::uint32_t length) {
  KeyDigestView view = digests(first, last - first);
  if (view.dim == 0) return view;
  candidate_sum_ = digest_sum_;
  if (first < last) {
    for (std::uint32_t p = std::max(last, sum_first_); p < length; ++p) {
      add_row(candidate_sum_, p, -1);  // protected window rows are T0, hence counted
    }
  }
  view.sum = candidate_sum_;
  view.sum_shift = sum_shift_;
  return view;
}

std::size_t TokenFeatures::bytes() const noexcept {
  return recent_.capacity() * sizeof(float) + ranges_.capacity() * sizeof(float) +
         digest_codes_.capacity() + digest_inv_norms_.capacity() * sizeof(float);
}

}  // namespace kvtier::tier
