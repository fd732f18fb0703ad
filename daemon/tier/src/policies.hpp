// Internal: the policy classes behind make_policy() (policy.hpp documents each one).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/tier/policy.hpp"

namespace kvtier::tier::detail {

// Keys are the cumulative scores themselves (paper, h2o): no copy.
class ScorePolicy final : public RankingPolicy {
 public:
  explicit ScorePolicy(PolicyKind kind) : kind_(kind) {}
  PolicyKind kind() const noexcept override { return kind_; }
  std::span<const float> rank(const RankingContext& ctx,
                              std::vector<float>& scratch) const override;

 private:
  PolicyKind kind_;
};

class StreamingPolicy final : public RankingPolicy {
 public:
  PolicyKind kind() const noexcept override { return PolicyKind::kStreamingLlm; }
  std::span<const float> rank(const RankingContext& ctx,
                              std::vector<float>& scratch) const override;
};

class RandomPolicy final : public RankingPolicy {
 public:
  PolicyKind kind() const noexcept override { return PolicyKind::kRandom; }
  std::span<const float> rank(const RankingContext& ctx,
                              std::vector<float>& scratch) const override;
};

class VasePolicy final : public RankingPolicy {
 public:
  PolicyKind kind() const noexcept override { return PolicyKind::kVase; }
  std::span<const float> rank(const RankingContext& ctx,
                              std::vector<float>& scratch) const override;
};

class RKvPolicy final : public RankingPolicy {
 public:
  PolicyKind kind() const noexcept override { return PolicyKind::kRKv; }
  std::span<const float> rank(const RankingContext& ctx,
                              std::vector<float>& scratch) const override;
};

// The tiers of a range as the bytes CutSelector masks on.
inline std::span<const std::uint8_t> tier_bytes(std::span<const Tier> tiers) noexcept {
  return {reinterpret_cast<const std::uint8_t*>(tiers.data()), tiers.size()};
}

}  // namespace kvtier::tier::detail
