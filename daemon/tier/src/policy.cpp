// Policy names, the shared random draw, the factory and the three key-only policies (paper/h2o,
// streaming_llm, random). vase and r_kv live in their own files.
#include "kvtier/tier/policy.hpp"

#include <string>

#include "kvtier/base/check.hpp"

#include "policies.hpp"
#include "random_draw.hpp"

namespace kvtier::tier {

std::string_view policy_name(PolicyKind kind) noexcept {
  switch (kind) {
    case PolicyKind::kPaper: return "paper";
    case PolicyKind::kH2o: return "h2o";
    case PolicyKind::kStreamingLlm: return "streaming_llm";
    case PolicyKind::kRandom: return "random";
    case PolicyKind::kVase: return "vase";
    case PolicyKind::kRKv: return "r_kv";
  }
  return "unknown";
}

Result<PolicyKind> parse_policy(std::string_view name) {
  for (PolicyKind kind : kAllPolicies) {
    if (name == policy_name(kind)) return kind;
  }
  return make_error(Errc::kInvalidArgument,
                    "unknown policy '" + std::string(name) +
                        "' (expected paper, h2o, streaming_llm, random, vase or r_kv)");
}

double random_draw(std::uint64_t seed, std::uint64_t step, std::uint32_t position) noexcept {
  return detail::draw_at(detail::draw_prefix(seed, step), position);
}

std::unique_ptr<const RankingPolicy> make_policy(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kPaper:
    case PolicyKind::kH2o:
      return std::make_unique<detail::ScorePolicy>(kind);
    case PolicyKind::kStreamingLlm: return std::make_unique<detail::StreamingPolicy>();
    case PolicyKind::kRandom: return std::make_unique<detail::RandomPolicy>();
    case PolicyKind::kVase: return std::make_unique<detail::VasePolicy>();
    case PolicyKind::kRKv: return std::make_unique<detail::RKvPolicy>();
  }
  KVTIER_FAIL("make_policy(): unknown policy");
}

namespace detail {

std::span<const float> ScorePolicy::rank(const RankingContext& ctx, std::vector<float>&) const {
  return ctx.scores;
}

std::span<const float> StreamingPolicy::rank(const RankingContext& ctx,
                                             std::vector<float>& scratch) const {
  // float(position) is non-decreasing in position; above 2^24 neighbours may round to the same
  // key, and equal keys rank by position anyway, so the order is exactly position order.
  scratch.resize(ctx.tiers.size());
  for (std::size_t i = 0; i < scratch.size(); ++i) {
    scratch[i] = static_cast<float>(ctx.first_position + i);
  }
  return scratch;
}

std::span<const float> RandomPolicy::rank(const RankingContext& ctx,
                                          std::vector<float>& scratch) const {
  scratch.resize(ctx.tiers.size());
  const std::uint64_t prefix = draw_prefix(ctx.params->seed, ctx.step);
  for (std::size_t i = 0; i < scratch.size(); ++i) {
    const auto position = static_cast<std::uint32_t>(ctx.first_position + i);
    scratch[i] = static_cast<float>(draw_at(prefix, position));
  }
  return scratch;
}

}  // namespace detail
}  // namespace kvtier::tier
