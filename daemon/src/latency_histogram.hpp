// LatencyHistogram: a fixed-bucket histogram of durations, as Prometheus exposes histograms
// (cumulative `le` buckets, a sum and a count). The bounds are fixed so that histograms of
// different clients and daemons add up. Thread-safety: a plain value; its owner's thread only.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace kvtier::daemon {

class LatencyHistogram {
 public:
  // Upper bounds in seconds, 10 µs to 10 s; above the last is +Inf.
  static constexpr std::array<double, 16> kBounds = {1e-5,  2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
                                                     5e-3, 1e-2,   2.5e-2, 5e-2, 0.1,    0.5,  1.0,  10.0};

  void observe(std::chrono::nanoseconds duration) noexcept {
    const double seconds = std::chrono::duration<double>(duration).count();
    std::size_t i = 0;
    while (i < kBounds.size() && seconds > kBounds[i]) ++i;
    ++buckets_[i];
    sum_seconds_ += seconds;
    ++count_;
  }

  // Observations in (kBounds[i - 1], kBounds[i]]; index kBounds.size() is above the last bound.
  const std::array<std::uint64_t, kBounds.size() + 1>& buckets() const noexcept { return buckets_; }
  double sum_seconds() const noexcept { return sum_seconds_; }
  std::uint64_t count() const noexcept { return count_; }

 private:
  std::array<std::uint64_t, kBounds.size() + 1> buckets_{};
  double sum_seconds_ = 0;
  std::uint64_t count_ = 0;
};

}  // namespace kvtier::daemon
