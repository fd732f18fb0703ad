// decision_100k / decision_1m / decision_10m: one SequenceTiers::decide() over N tokens with
// heavy-tailed random scores (tier::bench_scores: lognormal, σ = 2) vs one std::nth_element over
// a copy of the same N floats, split at the same T0 cut (goals C2, C3 in
// research/perf-anchors.md §9). Only decide() and only nth_element are timed: the copy and the
// rollback() that restores the all-T0 state happen outside the clock. The two alternate in each
// repeat (their order flips every repeat) and the medians are compared.
//
// Parameters: the defaults (β = 0.5, sink 4, window 128) with r = 3% (the paper's knob), so a
// decision from the all-T0 state finds all three classes — about half the tokens move.
//
// decision_policy_<name>: the same at 1M tokens for each ranking policy, through
// tier::time_decision (bench_support.hpp; what time_policies runs per policy, called one policy at
// a time). The sequence
// carries the features the policy reads; hysteresis is cleared for the policies that refuse it.
// There all decides run first, then all nth_element copies (medians of each). r_kv's digest sum
// is kept by the sequence at ingest, so its timed decision includes one interval's (Δ = 64) key
// digest ingest before decide(): the steady-state cost of a decision, not the ranking alone.
// Its sparing search samples rows above 2048 candidates (policy.hpp), and the bench's isotropic
// digests make every sampled row scan the whole horizon (its worst case).
//
// decision_policy_r_kv_floor (how far r_kv's goal is from what its definition forces): r_kv's
// score of a token needs that token's key digest dotted with the sequence's digest sum, so no
// r_kv decision can do less than one pass of N dots (N x kBenchDigestDim int8 codes, 32 MB at
// 1M tokens, against an int16 sum; policy_rkv.cpp computes two per token, a high and a low half
// of its exact sum) and then a decision on the scores. The floor is that pass over the same N and
// digest size plus the cheapest decision kvtier makes (the paper policy's decide() over the same
// scores), timed together in a loop like r_kv's decisions, against the same nth_element (medians,
// same run). Timed apart, with the codes still cached from the previous pass, the pass ran about
// twice as fast here; after a decision it reads them from memory, as r_kv's decision does.
// A floor at or above 1 means the goal is out of reach on these grounds;
// decision_policy_r_kv_vs_floor (r_kv's decide over the floor) is what r_kv adds beyond it: the
// second dot half, the sparing search, the softmax and max-pool passes.
//
// Scaling (goal C3, 10M within ±25% of 1M): the move buffer of a 10M-token decision is 80 MB,
// above glibc's largest mmap threshold, so it used to arrive as fresh 4 KiB pages on every
// decision — ~10,000 page faults for the ~5M moves written, several ns per token on this VM. It is
// now mapped on transparent huge pages (SequenceTiers::allocate_moves), ~20 faults. What is left
// of the 10M/1M difference: the kernel still zeroes those 40 MB of fresh pages on every decision
// (clear_page, ~5% of a 10M decision), and the passes over 90 MB of scores, tiers and moves run
// from memory where 1M's 13 MB stay cached between repeats; the nth_element copy between two
// decides (40 MB at 10M) evicts them. Keeping the buffer mapped between decisions would remove
// the zeroing but hold 8 B per candidate for good, outside the 5 B/token budget (C8).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "harness.hpp"
#include "kvtier/tier/bench_support.hpp"
#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::bench {
namespace {

constexpr std::uint64_t kSeed = 42;
constexpr std::uint32_t kPolicyTokens = 1'000'000;

struct DecisionSize {
  const char* name;
  std::uint32_t tokens;
  int repeats;
  int quick_repeats;  // 0: skipped in --quick
};

constexpr DecisionSize kSizes[] = {
    {"decision_100k", 100'000, 51, 9},
    {"decision_1m", 1'000'000, 21, 5},
    {"decision_10m", 10'000'000, 7, 0},
};

tier::TierParams decision_params() {
  tier::TierParams params;
  params.evict_ratio = 0.03;
  return params;
}

Status run_size(const DecisionSize& size, const RunConfig& config, Reporter& reporter) {
  const int repeats = config.quick ? size.quick_repeats : size.repeats;
  if (repeats == 0) {
    reporter.progress(size.name, "skipped in --quick");
    return {};
  }
  const std::vector<float> scores = tier::bench_scores(size.tokens, kSeed);
  auto sequence = tier::bench_sequence(scores, decision_params());
  if (!sequence) return tl::unexpected(sequence.error());

  std::vector<float> copy;
  std::vector<double> decide_seconds;
  std::vector<double> nth_seconds;
  std::size_t moves = 0;
  std::size_t cut = 0;
  const auto time_decide = [&](bool keep) {
    const auto start = Clock::now();
    const tier::Decision& decision = sequence->decide();
    const auto end = Clock::now();
    moves = decision.moves.size();
    // nth_element splits where decide() splits T0 from the rest: below the top n_hbm survivors.
    cut = std::min<std::size_t>(size.tokens - 1, size.tokens - std::min(size.tokens, decision.hbm_budget));
    sequence->rollback();
    if (keep) decide_seconds.push_back(seconds_between(start, end));
  };
  const auto time_nth = [&](bool keep) {
    copy.assign(scores.begin(), scores.end());
    const auto start = Clock::now();
    std::nth_element(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(cut), copy.end());
    const auto end = Clock::now();
    do_not_optimize(copy[cut]);
    if (keep) nth_seconds.push_back(seconds_between(start, end));
  };
  time_decide(false);  // warm-up (and learns the cut for nth_element)
  time_nth(false);
  for (int r = 0; r < repeats; ++r) {
    if (r % 2 == 0) {
      time_decide(true);
      time_nth(true);
    } else {
      time_nth(true);
      time_decide(true);
    }
  }
  const double decide_ms = median(decide_seconds) * 1e3;
  const double nth_ms = median(nth_seconds) * 1e3;
  char note[160];
  std::snprintf(note, sizeof(note), "%u tokens, %zu moves, %d repeats; decide %.2f ns/token",
                size.tokens, moves, repeats, decide_ms * 1e6 / size.tokens);
  reporter.progress(size.name, note);
  reporter.report(Measure{size.name, nth_ms > 0 ? decide_ms / nth_ms : 0.0,
                          Figure{"decide", decide_ms, "ms"}, Figure{"nth_element", nth_ms, "ms"},
                          "<=1.0"});
  return {};
}

// One pass of n int8 digests of kBenchDigestDim dotted with a fixed int16 sum into n floats: the
// least work r_kv's redundancy score needs.
void digest_pass(const std::vector<std::int8_t>& codes, const std::vector<std::int16_t>& sum,
                 std::vector<float>& out) {
  constexpr std::uint32_t kDim = tier::kBenchDigestDim;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int8_t* q = codes.data() + i * kDim;
    std::int32_t dot = 0;
    for (std::uint32_t d = 0; d < kDim; ++d) dot += std::int32_t{q[d]} * sum[d];
    out[i] = static_cast<float>(dot);
  }
  do_not_optimize(out[out.size() / 2]);
}

// decision_policy_r_kv_floor and _vs_floor (see the top of the file), after r_kv's own measure.
// The floor is timed as one unit, the paper policy's decide() then the digest pass, repeated as
// r_kv's decisions are, so the pass finds the caches as a decision leaves them.
Status report_rkv_floor(double decide_seconds, double nth_seconds, int repeats, Reporter& reporter) {
  tier::TierParams params = decision_params();
  params.policy = tier::PolicyKind::kPaper;
  const std::vector<float> scores = tier::bench_scores(kPolicyTokens, kSeed);
  auto paper = tier::bench_sequence(scores, params);
  if (!paper) return tl::unexpected(paper.error());
  std::mt19937_64 rng(kSeed);
  std::vector<std::int8_t> codes(std::size_t{kPolicyTokens} * tier::kBenchDigestDim);
  for (std::int8_t& c : codes) c = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<std::int16_t> sum(tier::kBenchDigestDim);
  for (std::int16_t& v : sum) v = static_cast<std::int16_t>(static_cast<int>(rng() % 65535) - 32767);
  std::vector<float> dots(kPolicyTokens);
  std::vector<double> floor_seconds;
  for (int r = 0; r <= repeats; ++r) {  // the first is a warm-up
    const auto start = Clock::now();
    do_not_optimize(paper->decide().moves.size());
    digest_pass(codes, sum, dots);
    const auto end = Clock::now();
    paper->rollback();
    if (r > 0) floor_seconds.push_back(seconds_between(start, end));
  }
  const double floor_ms = median(floor_seconds) * 1e3;
  const double nth_ms = nth_seconds * 1e3;
  reporter.report(Measure{"decision_policy_r_kv_floor", floor_ms / nth_ms, Figure{"floor", floor_ms, "ms"},
                          Figure{"nth_element", nth_ms, "ms"}, "bound"});
  reporter.report(Measure{"decision_policy_r_kv_vs_floor", decide_seconds * 1e3 / floor_ms,
                          Figure{"decide", decide_seconds * 1e3, "ms"}, Figure{"floor", floor_ms, "ms"},
                          "bound"});
  return {};
}

Status run_policy(tier::PolicyKind kind, const RunConfig& config, Reporter& reporter) {
  const std::string name = "decision_policy_" + std::string(tier::policy_name(kind));
  tier::TierParams params = decision_params();
  params.policy = kind;
  if (!tier::policy_traits(kind).supports_hysteresis) params.hysteresis = 0.0;
  const int repeats = config.quick ? 3 : 9;
  auto timing = tier::time_decision(kPolicyTokens, params, kSeed, repeats);
  if (!timing) return tl::unexpected(timing.error());
  const double decide_ms = timing->decide_seconds * 1e3;
  const double nth_ms = timing->nth_element_seconds * 1e3;
  char note[160];
  std::snprintf(note, sizeof(note), "%u tokens, %zu moves, %d repeats, %zu B/token; decide %.2f ns/token",
                kPolicyTokens, timing->moves, repeats, timing->bytes_per_token,
                decide_ms * 1e6 / kPolicyTokens);
  reporter.progress(name, note);
  reporter.report(Measure{name, timing->ratio(), Figure{"decide", decide_ms, "ms"},
                          Figure{"nth_element", nth_ms, "ms"}, "<=1.0"});
  if (kind == tier::PolicyKind::kRKv) {
    return report_rkv_floor(timing->decide_seconds, timing->nth_element_seconds, repeats, reporter);
  }
  return {};
}

}  // namespace

void register_decision(Registry& registry) {
  for (const DecisionSize& size : kSizes) {
    registry.add(size.name,
                 "SequenceTiers::decide() over " + std::to_string(size.tokens) +
                     " lognormal scores vs one std::nth_element on a copy",
                 [&size](const RunConfig& config, Reporter& reporter) {
                   return run_size(size, config, reporter);
                 });
  }
  for (const tier::PolicyKind kind : tier::kAllPolicies) {
    registry.add("decision_policy_" + std::string(tier::policy_name(kind)),
                 "SequenceTiers::decide() under the " + std::string(tier::policy_name(kind)) +
                     " policy over 1M lognormal scores (+ its features) vs one std::nth_element",
                 [kind](const RunConfig& config, Reporter& reporter) {
                   return run_policy(kind, config, reporter);
                 });
  }
}

}  // namespace kvtier::bench
