// Helpers for kvtier-bench (goals C2, C3, C8 in research/perf-anchors.md §9): build a large
// sequence with reproducible random scores and time one tier decision against one
// std::nth_element over the same scores, in the same run. Plain functions; no benchmark
// framework, no output.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/base/error.hpp"
#include "kvtier/tier/sequence_tiers.hpp"
#include "kvtier/tier/tier_params.hpp"

namespace kvtier::tier {

// n heavy-tailed scores (lognormal, σ = 2, like cumulative attention), deterministic per seed.
std::vector<float> bench_scores(std::uint32_t n, std::uint64_t seed);

// Digest dimension bench_sequence uses for r_kv.
inline constexpr std::uint32_t kBenchDigestDim = 32;

// A sequence with prompt 0 and scores.size() tokens holding `scores` (all T0, step 0), ready
// for decide(), with the features params.policy reads: recent attention = the scores (one add);
// vase: value ranges lognormal(0, 1); r_kv: isotropic normal key digests of kBenchDigestDim
// (near-duplicates are rare, so the sparing search scans its whole horizon: r_kv's worst case).
// Features are deterministic per params.seed. Fails as SequenceTiers::create does.
Result<SequenceTiers> bench_sequence(std::span<const float> scores, const TierParams& params);

struct DecisionTiming {
  double decide_seconds = 0.0;       // median of decide() + rollback() from the all-T0 state
  double nth_element_seconds = 0.0;  // median of std::nth_element on a fresh copy (copy untimed)
  std::size_t moves = 0;             // moves of one decision
  std::size_t bytes_per_token = SequenceTiers::kMetadataBytesPerToken;  // of the policy timed
  double ratio() const { return nth_element_seconds > 0 ? decide_seconds / nth_element_seconds : 0; }
};

// Times both on n tokens of bench_scores(n, seed); nth_element splits at the same T0 cut
// (n − T0 budget). The decision always starts from the all-T0 state, its most expensive case
// (about half the tokens move). Under r_kv each timed decision also includes rewriting the key
// digests of params.interval managed tokens: the steady state of one decision, whose digest
// sum is maintained at ingest, plus a full ranking of every candidate. repeats >= 1.
Result<DecisionTiming> time_decision(std::uint32_t n, const TierParams& params, std::uint64_t seed,
                                     int repeats);

struct PolicyTiming {
  PolicyKind policy = PolicyKind::kPaper;
  DecisionTiming timing;
};

// time_decision once per policy in kAllPolicies, with params.policy replaced (and hysteresis
// cleared for the policies that refuse it); same scores and nth_element baseline for each.
Result<std::vector<PolicyTiming>> time_policies(std::uint32_t n, const TierParams& params,
                                                std::uint64_t seed, int repeats);

}  // namespace kvtier::tier
