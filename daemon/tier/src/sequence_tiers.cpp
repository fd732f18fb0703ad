// SequenceTiers: score ingest, step bookkeeping, commit/rollback and accessors.
// The decision itself lives in sequence_decide.cpp.
#include "kvtier/tier/sequence_tiers.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "kvtier/base/check.hpp"
#include "score_loops.hpp"

namespace kvtier::tier {
namespace {

using detail::kFirstInvalidBits;
using detail::score_bits;

std::size_t first_invalid_score(std::span<const float> values) noexcept {
  std::size_t i = 0;
  while (i < values.size() && score_bits(values[i]) < kFirstInvalidBits) ++i;
  return i;
}

// s[i] += values[i] unless the token is T3 (its score stays 0): score_loops.hpp's loop.
void accumulate_scores(float* s, const Tier* t, std::span<const float> values) noexcept {
  detail::add_unless_dropped(s, t, values.data(), values.size());
}

// The first position that can ever be managed (managed_first() once the sequence is that long),
// clamped to max_tokens.
std::uint32_t sum_first(std::uint32_t prompt_length, const TierParams& params,
                        std::uint32_t max_tokens) {
  const std::uint64_t prompt = protects_prompt(params) ? prompt_length : 0;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(prompt + params.sink_tokens, max_tokens));
}

std::string fmt_value(float value) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(value));
  return buf;
}

}  // namespace

Result<SequenceTiers> SequenceTiers::create(std::uint32_t prompt_length, const TierParams& params,
                                            std::uint32_t max_tokens) {
  if (auto status = validate(params); !status) return tl::unexpected(status.error());
  if (max_tokens == 0) {
    return make_error(Errc::kInvalidArgument, "sequence tiers: max_tokens must be >= 1, got 0");
  }
  if (prompt_length > max_tokens) {
    return make_error(Errc::kInvalidArgument,
                      "sequence tiers: prompt_length " + std::to_string(prompt_length) +
                          " exceeds max_tokens " + std::to_string(max_tokens));
  }
  return SequenceTiers(prompt_length, params, max_tokens);
}

SequenceTiers::SequenceTiers(std::uint32_t prompt_length, const TierParams& params,
                             std::uint32_t max_tokens)
    : params_(params),
      policy_(make_policy(params.policy)),
      features_(params, sum_first(prompt_length, params, max_tokens), max_tokens),
      step_sums_(score_shipping(params).score_factor),
      prompt_length_(prompt_length),
      max_tokens_(max_tokens) {
  if (const ScoreShipping shipping = score_shipping(params); shipping.recent) step_recent_.emplace(shipping.recent_factor);
  extend_to(prompt_length);
}

void SequenceTiers::extend_to(std::uint32_t new_length) {
  const std::uint32_t old_length = length();
  if (new_length <= old_length) return;
  scores_.resize(new_length, 0.0f);
  tiers_.resize(new_length, Tier::kT0);
  features_.resize(new_length);
  counts_[tier_index(Tier::kT0)] += new_length - old_length;
}

Status SequenceTiers::check_range(std::uint32_t first_position, std::size_t count,
                                  const char* what) const {
  const std::uint64_t end = std::uint64_t{first_position} + count;
  if (end <= max_tokens_) return {};
  return make_error(Errc::kInvalidArgument,
                    std::string(what) + " position " +
                        std::to_string(std::max<std::uint64_t>(first_position, max_tokens_)) +
                        " is at or beyond max_tokens " + std::to_string(max_tokens_));
}

Status SequenceTiers::add_value_ranges(std::uint32_t first_position,
                                       std::span<const float> ranges) {
  if (auto status = features_.check_value_ranges(first_position, ranges); !status) return status;
  if (auto status = check_range(first_position, ranges.size(), "value range"); !status) {
    return status;
  }
  if (ranges.empty()) return {};
  extend_to(static_cast<std::uint32_t>(first_position + ranges.size()));
  return features_.set_value_ranges(first_position, ranges);
}

Status SequenceTiers::add_key_digests(std::uint32_t first_position, std::span<const float> keys,
                                      std::uint32_t dim) {
  if (auto status = features_.check_key_digests(first_position, keys, dim); !status) {
    return status;
  }
  const std::size_t rows = keys.size() / dim;
  if (auto status = check_range(first_position, rows, "key digest"); !status) return status;
  if (rows == 0) return {};
  extend_to(static_cast<std::uint32_t>(first_position + rows));
  return features_.set_key_digests(first_position, keys, dim, tiers_);
}

namespace {

// check_scores' refusal: which check failed, and where. Kept out of check_scores so that the
// test itself is small enough to inline into the callers of this file (once per score record).
[[gnu::cold, gnu::noinline]] Error refused_scores(std::uint32_t first_position, std::span<const float> values,
                                                  std::uint32_t max_tokens) {
  const std::uint64_t end = std::uint64_t{first_position} + values.size();
  if (end > max_tokens) {
    const std::uint64_t bad = std::max<std::uint64_t>(first_position, max_tokens);
    return Error{Errc::kInvalidArgument, "score position " + std::to_string(bad) + " (value " +
                                             fmt_value(values[bad - first_position]) +
                                             ") is at or beyond max_tokens " + std::to_string(max_tokens)};
  }
  const std::size_t i = first_invalid_score(values);
  const float v = values[i];
  const char* what = std::isnan(v) ? "is NaN" : std::isinf(v) ? "is infinite" : "is negative";
  return Error{Errc::kInvalidArgument, "score at position " + std::to_string(first_position + i) + " " +
                                           what + " (" + fmt_value(v) + ")"};
}

}  // namespace

// Inline: only this file calls it, once per score record.
inline Status SequenceTiers::check_scores(std::uint32_t first_position, std::span<const float> values) const {
  const bool fits = std::uint64_t{first_position} + values.size() <= max_tokens_;
  if (fits && detail::all_valid_scores(values.data(), values.size())) [[likely]] return {};
  return tl::unexpected(refused_scores(first_position, values, max_tokens_));
}

Status SequenceTiers::check_interval_end(const char* what) const {
  if (completes_interval()) return {};
  return make_error(Errc::kInvalidArgument,
                    std::string(what) + " arrived in step " + std::to_string(step_ + 1) +
                        ", which completes no interval of " + std::to_string(params_.interval) +
                        " steps");
}

Status SequenceTiers::add_scores(std::uint32_t first_position, std::span<const float> values) {
  if (values.empty()) return {};
  // Validate everything first so a bad record changes nothing.
  if (auto status = check_scores(first_position, values); !status) return status;
  const auto end = static_cast<std::uint32_t>(first_position + values.size());
  extend_to(end);
  accumulate_scores(scores_.data() + first_position, tiers_.data() + first_position, values);
  features_.add_recent(first_position, values, tiers_);
  return {};
}

Status SequenceTiers::add_score_sums(std::uint32_t first_position, std::span<const float> sums) {
  if (auto status = check_interval_end("attention sums"); !status) return status;
  if (sums.empty()) return {};
  if (auto status = check_scores(first_position, sums); !status) return status;
  extend_to(static_cast<std::uint32_t>(first_position + sums.size()));
  accumulate_scores(scores_.data() + first_position, tiers_.data() + first_position, sums);
  return {};
}

Status SequenceTiers::add_recent_sums(std::uint32_t first_position, std::span<const float> sums) {
  if (!policy_traits(params_.policy).uses_recent_attention) {
    return make_error(Errc::kBadState, "policy " + std::string(policy_name(params_.policy)) +
                                           " does not use recent attention");
  }
  if (auto status = check_interval_end("recent-attention sums"); !status) return status;
  if (sums.empty()) return {};
  if (auto status = check_scores(first_position, sums); !status) return status;
  extend_to(static_cast<std::uint32_t>(first_position + sums.size()));
  features_.add_recent(first_position, sums, tiers_);
  return {};
}

Status SequenceTiers::accumulate_step_scores(std::uint32_t first_position, std::span<const float> values) {
  if (values.empty()) return {};
  if (auto status = check_scores(first_position, values); !status) return status;
  step_sums_.add(first_position, values);
  if (step_recent_) step_recent_->add(first_position, values);
  return {};
}

void SequenceTiers::fold_step_sums() {
  // The sums the client would have shipped for this interval, added as add_score_sums and
  // add_recent_sums add them (extension included), then the accumulators restart.
  const auto add = [this](kernels::IntervalSum& sum, bool recent) {
    const std::uint32_t first = sum.touched_begin();
    const std::uint32_t end = sum.touched_end();
    if (first == end) return;
    const std::span<const float> sums = sum.finish().subspan(first, end - first);
    extend_to(end);
    if (recent) {
      features_.add_recent(first, sums, tiers_);
    } else {
      accumulate_scores(scores_.data() + first, tiers_.data() + first, sums);
    }
    sum.reset();
  };
  add(step_sums_, false);
  if (step_recent_) add(*step_recent_, true);
}

Status SequenceTiers::grow_to(std::uint32_t length) {
  if (length > max_tokens_) {
    return make_error(Errc::kInvalidArgument, "sequence length " + std::to_string(length) +
                                                  " is beyond max_tokens " + std::to_string(max_tokens_));
  }
  extend_to(length);
  return {};
}

void SequenceTiers::end_step() {
  if (completes_interval()) {
    fold_step_sums();
  } else {
    step_sums_.end_step();
    if (step_recent_) step_recent_->end_step();
  }
  ++step_;
  features_.end_step();
  if (params_.decay < 1.0) {
    const auto d = static_cast<float>(params_.decay);
    for (float& s : scores_) s *= d;  // T3 scores are 0 and stay 0
  }
}

void SequenceTiers::commit() {
  KVTIER_CHECK(pending_.has_value(), "commit() without a pending decision");
  for (const TierMove& move : pending_->decision.moves) apply(move);
  pending_.reset();
}

void SequenceTiers::commit(std::span<const TierMove> accepted) {
  KVTIER_CHECK(pending_.has_value(), "commit() without a pending decision");
  const std::span<const TierMove> proposed = pending_->decision.moves;
  std::size_t next = 0;
  for (const TierMove& move : accepted) {
    while (next < proposed.size() && !(proposed[next] == move)) ++next;
    KVTIER_CHECK(next < proposed.size(), "commit(): accepted move was not proposed");
    ++next;
  }
  for (const TierMove& move : accepted) apply(move);
  pending_.reset();
}

void SequenceTiers::rollback() {
  KVTIER_CHECK(pending_.has_value(), "rollback() without a pending decision");
  pending_.reset();
}

void SequenceTiers::apply(const TierMove& move) {
  Tier& tier = tiers_[move.position];
  KVTIER_CHECK(tier == move.from, "move does not start at the committed tier");
  --counts_[tier_index(move.from)];
  ++counts_[tier_index(move.to)];
  tier = move.to;
  features_.moved(move.position, move.from, move.to);
  if (move.to == Tier::kT3) {
    ++destroyed_;
    scores_[move.position] = 0.0f;
  }
}

Tier SequenceTiers::tier_of(std::uint32_t position) const {
  KVTIER_CHECK(position < length(), "tier_of(): position beyond length");
  return tiers_[position];
}

float SequenceTiers::score_of(std::uint32_t position) const {
  KVTIER_CHECK(position < length(), "score_of(): position beyond length");
  return scores_[position];
}

float SequenceTiers::recent_of(std::uint32_t position) const {
  KVTIER_CHECK(position < length(), "recent_of(): position beyond length");
  const std::span<const float> recent = features_.recent(position, 1);
  return recent.empty() ? 0.0f : recent[0];
}

std::uint32_t SequenceTiers::managed_first() const noexcept {
  const std::uint64_t prompt = protects_prompt(params_) ? prompt_length_ : 0;
  const std::uint64_t head = prompt + params_.sink_tokens;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(head, length()));
}

std::uint32_t SequenceTiers::managed_last() const noexcept {
  const std::uint32_t len = length();
  const std::uint32_t tail = len > params_.window_tokens ? len - params_.window_tokens : 0;
  return std::max(tail, managed_first());
}

bool SequenceTiers::is_protected(std::uint32_t position) const noexcept {
  return position < managed_first() || position >= managed_last();
}

std::uint32_t SequenceTiers::managed() const noexcept { return managed_last() - managed_first(); }

double SequenceTiers::destroyed_fraction() const noexcept {
  const std::uint32_t m = managed();
  return m == 0 ? 0.0 : static_cast<double>(destroyed_) / static_cast<double>(m);
}

std::size_t SequenceTiers::metadata_bytes() const noexcept {
  return scores_.capacity() * sizeof(float) + tiers_.capacity() * sizeof(Tier) +
         features_.bytes() + (key_scratch_.capacity() + rank_workspace_.capacity()) * sizeof(float) +
         step_sums_.bytes() + (step_recent_ ? step_recent_->bytes() : 0);
}

std::size_t SequenceTiers::metadata_bytes_per_token() const noexcept {
  return policy_bytes_per_token(params_.policy, features_.digest_dim());
}

std::uint32_t SequenceTiers::candidate_count(bool t0_only) const noexcept {
  // Every protected position is a live T0 token: it arrived as T0 and decide() never touches it.
  const std::uint32_t protected_count = length() - managed();
  std::uint32_t n = counts_[tier_index(Tier::kT0)] - protected_count;
  if (!t0_only) n += counts_[tier_index(Tier::kT1)] + counts_[tier_index(Tier::kT2)];
  return n;
}

}  // namespace kvtier::tier
