// IntervalSum (interval_scores.hpp): the per-interval score accumulation both sides share.
#include "kvtier/kernels/interval_scores.hpp"

#include <algorithm>
#include <cmath>

namespace kvtier::kernels {

float decay_power(float factor, std::uint64_t steps) noexcept {
  if (steps == 0 || factor == 1.0f) return 1.0f;
  return static_cast<float>(std::pow(static_cast<double>(factor), static_cast<double>(steps)));
}

void scale_scores(std::span<float> values, float factor) noexcept {
  if (factor == 1.0f) return;
  float* v = values.data();
  const std::size_t n = values.size();
  for (std::size_t i = 0; i < n; ++i) v[i] *= factor;
}

void IntervalSum::apply_pending() noexcept {
  if (pending_ == 0) return;
  scale_scores(std::span<float>(values_.data() + touched_begin_, touched_end_ - touched_begin_),
               decay_power(factor_, pending_));  // untouched entries are 0
  pending_ = 0;
}

void IntervalSum::add(std::uint32_t first, std::span<const float> values) {
  if (values.empty()) return;
  apply_pending();
  const auto end = static_cast<std::uint32_t>(first + values.size());
  if (end > values_.size()) values_.resize(end, 0.0f);
  if (touched_begin_ == touched_end_) {
    touched_begin_ = first;
    touched_end_ = end;
  } else {
    touched_begin_ = std::min(touched_begin_, first);
    touched_end_ = std::max(touched_end_, end);
  }
  float* __restrict v = values_.data() + first;
  const float* __restrict x = values.data();
  const std::size_t n = values.size();
  for (std::size_t i = 0; i < n; ++i) v[i] += x[i];
}

void IntervalSum::end_step() noexcept {
  if (factor_ != 1.0f) ++pending_;
}

std::span<const float> IntervalSum::finish() noexcept {
  apply_pending();
  return {values_.data(), values_.size()};
}

void IntervalSum::reset() noexcept {
  // Only the touched range can be non-zero.
  std::fill(values_.begin() + touched_begin_, values_.begin() + touched_end_, 0.0f);
  pending_ = 0;
  touched_begin_ = touched_end_ = 0;
}

void IntervalSum::clear() noexcept {
  std::vector<float>().swap(values_);
  pending_ = 0;
  touched_begin_ = touched_end_ = 0;
}

}  // namespace kvtier::kernels
