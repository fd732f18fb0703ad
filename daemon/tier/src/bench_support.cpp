// Benchmark helpers (see bench_support.hpp).
#include "kvtier/tier/bench_support.hpp"

#include <algorithm>
#include <chrono>
#include <random>

namespace kvtier::tier {
namespace {

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::vector<float> bench_scores(std::uint32_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> scores(n);
  for (float& s : scores) s = dist(rng);
  return scores;
}

Result<SequenceTiers> bench_sequence(std::span<const float> scores, const TierParams& params) {
  const auto n = static_cast<std::uint32_t>(scores.size());
  auto seq = SequenceTiers::create(0, params, std::max<std::uint32_t>(n, 1));
  if (!seq) return seq;
  if (auto status = seq->add_scores(0, scores); !status) return tl::unexpected(status.error());
  const PolicyTraits traits = policy_traits(params.policy);
  std::mt19937_64 rng(params.seed ^ 0x5EEDF00Dull);
  if (traits.uses_value_ranges) {
    std::lognormal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> ranges(n);
    for (float& r : ranges) r = dist(rng);
    if (auto status = seq->add_value_ranges(0, ranges); !status) {
      return tl::unexpected(status.error());
    }
  }
  if (traits.uses_key_digests) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> keys(std::size_t{n} * kBenchDigestDim);
    for (float& k : keys) k = dist(rng);
    if (auto status = seq->add_key_digests(0, keys, kBenchDigestDim); !status) {
      return tl::unexpected(status.error());
    }
  }
  return seq;
}

Result<DecisionTiming> time_decision(std::uint32_t n, const TierParams& params, std::uint64_t seed,
                                     int repeats) {
  const std::vector<float> scores = bench_scores(n, seed);
  auto seq = bench_sequence(scores, params);
  if (!seq) return tl::unexpected(seq.error());
  repeats = std::max(repeats, 1);

  DecisionTiming timing;
  std::vector<double> decide_times;
  std::uint32_t hbm_budget = 0;
  // r_kv keeps its digest sum up to date at ingest (token_features.hpp), work that used to be
  // part of every decision: each timed decision is preceded by one interval's worth of digest
  // ingest, as a rewrite of the interval newest managed tokens (their old rows leave the sum,
  // the new ones enter it: twice what new tokens cost).
  const bool digests = policy_traits(params.policy).uses_key_digests;
  const std::uint32_t fresh = std::min(params.interval, n);
  const std::uint32_t fresh_first =
      n > params.window_tokens + fresh ? n - params.window_tokens - fresh : 0;
  std::vector<float> fresh_keys;
  if (digests) {
    std::mt19937_64 rng(seed ^ 0xD16E57ull);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    fresh_keys.resize(std::size_t{fresh} * kBenchDigestDim);
    for (float& k : fresh_keys) k = dist(rng);
  }
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    if (digests) {
      if (auto status = seq->add_key_digests(fresh_first, fresh_keys, kBenchDigestDim); !status) {
        return tl::unexpected(status.error());
      }
    }
    const Decision& d = seq->decide();
    timing.moves = d.moves.size();
    hbm_budget = d.hbm_budget;
    seq->rollback();
    decide_times.push_back(seconds_since(start));
  }

  std::vector<double> nth_times;
  std::vector<float> copy;
  const std::size_t k = n - std::min<std::size_t>(n, hbm_budget);
  for (int r = 0; r < repeats; ++r) {
    copy.assign(scores.begin(), scores.end());
    const auto start = std::chrono::steady_clock::now();
    std::nth_element(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(k, n ? n - 1 : 0)), copy.end());
    nth_times.push_back(seconds_since(start));
  }
  timing.decide_seconds = median(decide_times);
  timing.nth_element_seconds = median(nth_times);
  timing.bytes_per_token = seq->metadata_bytes_per_token();
  return timing;
}

Result<std::vector<PolicyTiming>> time_policies(std::uint32_t n, const TierParams& params,
                                                std::uint64_t seed, int repeats) {
  std::vector<PolicyTiming> out;
  for (PolicyKind kind : kAllPolicies) {
    TierParams p = params;
    p.policy = kind;
    if (!policy_traits(kind).supports_hysteresis) p.hysteresis = 0.0;
    auto timing = time_decision(n, p, seed, repeats);
    if (!timing) return tl::unexpected(timing.error());
    out.push_back({kind, *timing});
  }
  return out;
}

}  // namespace kvtier::tier
