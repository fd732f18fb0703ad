// Per-sequence tier state: cumulative importance scores, each token's committed tier, and the
// paper's tier decision (research/seed-algorithms.md §3, §9; DESIGN.md §5) with two-phase commit.
//
// Lifecycle, as the daemon drives it (scores arrive one of two ways; shm/LAYOUT.md "Records"):
//   per decision: add_score_sums(...)* add_recent_sums(...)* in the step that completes an
//                 interval (completes_interval()), end_step() once per decode step;
//   per step:     accumulate_step_scores(...)* end_step() once per decode step; end_step() of
//                 the step that completes an interval folds what was accumulated exactly as the
//                 per-decision calls would have added it (kernels/interval_scores.hpp), so the
//                 two ways give bit-identical scores, recent attention and decisions.
//   add_scores(...) adds at once (s += x per call, the in-process API of simulations and tests).
//   if (due()) { d = decide(); send d.moves; on ack commit(accepted); on failure rollback(); }
//   under pool pressure, between decisions: propose(moves), then the same send/commit/rollback
// decide() (like propose()) changes nothing visible: it leaves a pending decision whose moves are
// applied to the committed assignment only by commit(), so a plan the client never acknowledged
// leaves the sequence exactly as it was. Scores keep accumulating while a decision is pending.
//
// Protected set (always T0): the prompt [0, P) when protects_prompt(params) (the policy's default
// unless TierParams::protect_prompt says otherwise), the next sink_tokens positions (the first
// generated ones, or the first of the sequence when the prompt is not protected) and the newest
// window_tokens positions. The rest of the positions form the managed range; its live tokens are
// U. A token never re-enters the protected set, so decide() only touches the managed range.
//
// decide() (per TierParams::mode; see tier_params.hpp for the budget formulas):
//   ranks U ascending by (key, position), key = the policy's ranking key (policy.hpp; the
//   cumulative score for paper and h2o): equal keys rank older (lower) positions lower, so
//   they are evicted/demoted first. The lowest n_evict go to T3, the top n_hbm of the survivors
//   to T0, of the rest the lowest n_t2 (int8 budget; 0 unless enabled) to T2 and the others to
//   T1. Cut points come from CutSelector (radix select, no sort): three streaming passes over
//   the managed range (histogram, boundary gather, classify + emit; classify skips blocks of 16
//   tokens that provably keep their tier).
// T2 rules (they override the split; the plain split is what Decision's budgets describe):
//   (a) T2 is reached only from T1: the daemon quantizes T1 rows it owns and cannot read HBM, so
//       a token now in T0 that the split puts in T2 goes to T1 (a later decision may demote it
//       T1 -> T2).
//   (b) Quantized once: a token now in T2 never goes back to T1; where the split says T1 it
//       stays in T2. T2 -> T0 (a dequantizing promotion) and T2 -> T3 are allowed.
//   With T2 off and no T2 tokens the classify pass is the three-tier one (no extra cost).
// Hysteresis h > 0 (kCumulative, kPaperAlgorithm only) applies to the T0 boundary only: let
//   c_hi be the score of the lowest survivor the plain split keeps in T0 and c_lo that of the
//   highest it leaves outside T0 (c_lo <= c_hi). A token now in T0 is demoted (to T1) only if
//   its score < c_hi·(1−h); a token now in T1/T2 is promoted only if its score > c_lo·(1+h),
//   else it takes its place outside T0 (T1 or T2 by the split and the rules above; a T2 token
//   stays in T2). (Each side's margin is taken from the other side's boundary token, so a
//   boundary token is never stuck behind its own score.) Tokens leaving the window arrive as T0
//   and follow the T0 rule. Eviction is unaffected. The unprotected T0 count may then differ
//   from n_hbm by at most the number of survivors whose score lies in [c_hi·(1−h), c_lo·(1+h)];
//   Decision::hysteresis_held counts the tokens actually held. No margin applies when the plain
//   split puts every survivor in one tier.
// Decay d < 1: end_step() multiplies every score by d, so after step t a score is
//   Σ_j d^(t−j+1)·x_j: the same as s ← d·s + x at each step's add, times one common factor d
//   that no ranking or relative hysteresis test can see. (Per-interval sums are Σ_j d^(t−j)·x_j
//   over the interval, added before its last end_step: the same weights, rounded differently.)
//   Decay costs one multiply per token per step here, whichever way scores arrive.
//
// Hysteresis applies to paper and h2o only (validate() refuses it for the other policies).
//
// Pressure hooks (a node-wide cascade T1 -> T2 -> T3 when pools run short; DESIGN.md §4.1):
// lowest_in_tier() lists victim candidates by cumulative score, eviction_headroom() says how many
// tokens the sequence's eviction budget still allows destroying, and propose() leaves a pending
// decision of exactly the daemon's moves, committed or rolled back like decide()'s.
//
// Per-token policy features (token_features.hpp): add_value_ranges (vase) and add_key_digests
// (r_kv); recent attention (vase, r_kv) is derived from add_scores. A policy that does not use a
// feature refuses it with kBadState, so clients send features only for the policy selected.
//
// Memory: 5 bytes per token (float score + 1-byte tier; kMetadataBytesPerToken) under paper,
// h2o, streaming_llm and random; vase 13, r_kv 13 + digest dim (policy_bytes_per_token). Policies
// other than paper and h2o keep a 4-byte-per-managed-token key scratch between decisions, r_kv
// 4 more per candidate (its ranking workspace) and an exact digest sum (8 B per dim). Between
// decide() and commit()/rollback() only, a move buffer of 8 bytes per candidate is reserved, of
// which only the pages holding actual moves are ever touched (above 32 MiB, on huge pages where
// the kernel grants them).
// Thread-safety: none; the daemon owns each sequence on one thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "kvtier/kernels/interval_scores.hpp"
#include "kvtier/base/error.hpp"
#include "kvtier/tier/policy.hpp"
#include "kvtier/tier/tier.hpp"
#include "kvtier/tier/tier_move.hpp"
#include "kvtier/tier/tier_params.hpp"
#include "kvtier/tier/token_features.hpp"

namespace kvtier::tier {

// What decide() (or propose(), see there) leaves pending; valid until commit() or rollback().
struct Decision {
  std::span<const TierMove> moves;    // tier changes only, in position order; empty if none
  std::uint32_t candidates = 0;       // tokens ranked (|U|; unprotected T0 in kPaperPrototype)
  std::uint32_t evict_count = 0;      // moves to T3
  std::uint32_t hbm_budget = 0;       // n_hbm (n_keep in kPaperPrototype) before hysteresis
  std::uint32_t int8_budget = 0;      // n_t2 of the plain split, before the T2 rules
  std::uint32_t hysteresis_held = 0;  // tokens the margin kept in their old tier
  bool skipped = false;               // kPaperPrototype round with < 10 candidates
};

// A token and its cumulative score, as lowest_in_tier() lists victim candidates.
struct ScoredPosition {
  float score;
  std::uint32_t position;
  friend bool operator==(const ScoredPosition&, const ScoredPosition&) = default;
};

class SequenceTiers {
 public:
  static constexpr std::size_t kMetadataBytesPerToken = sizeof(float) + sizeof(Tier);
  static constexpr std::uint32_t kPrototypeMinCandidates = 10;
  // A decision's move buffer (8 B per candidate) at least this large gets its own mapping on
  // transparent huge pages instead of heap memory (see Pending below).
  static constexpr std::size_t kMappedMoveBufferBytes = std::size_t{32} << 20;

  // The prompt's P tokens exist from the start (T0, score 0). kInvalidArgument if params fail
  // validate(), max_tokens is 0, or prompt_length > max_tokens. max_tokens bounds memory: no
  // position at or beyond it is ever accepted.
  static Result<SequenceTiers> create(std::uint32_t prompt_length, const TierParams& params,
                                      std::uint32_t max_tokens);

  // Adoption after a daemon restart (DESIGN.md invariant 7): the sequence as its client records
  // it, `length` tokens of which `placed` lists every one not in T0 as (position, tier),
  // positions strictly ascending; the others are T0. Scores, features and step() restart at 0.
  // kInvalidArgument, naming the position, for length < prompt_length or > max_tokens, a
  // position >= length or out of order, a T0 entry, a non-T0 token in the protected set, or a
  // T2 token where the params do not enable T2; create()'s errors otherwise.
  static Result<SequenceTiers> restore(std::uint32_t prompt_length, const TierParams& params, std::uint32_t max_tokens,
                                       std::uint32_t length, std::span<const std::pair<std::uint32_t, Tier>> placed);

  // Adds this step's score values[i] to position first_position + i (scores of T3 tokens are
  // ignored). Positions beyond length() extend the sequence; new tokens start in T0 with score
  // 0. kInvalidArgument, naming the position and value, for NaN, infinite or negative values and
  // positions >= max_tokens; nothing is applied then.
  Status add_scores(std::uint32_t first_position, std::span<const float> values);

  // vase: sets the value range of position first_position + i to ranges[i] (the client's max
  // over layers and KV heads of max_d v − min_d v). kBadState under another policy;
  // kInvalidArgument for NaN, infinite or negative values or positions >= max_tokens. Extends the
  // sequence like add_scores. Nothing is applied on error.
  Status add_value_ranges(std::uint32_t first_position, std::span<const float> ranges);

  // r_kv: sets the key digest of position first_position + i to keys[i·dim, (i+1)·dim). The
  // first call fixes dim (1..TokenFeatures::kMaxDigestDim) for the sequence. kBadState under
  // another policy; kInvalidArgument for non-finite components, a bad or changed dim, a size not
  // a multiple of dim, positions >= max_tokens. Extends the sequence like add_scores. Nothing is
  // applied on error. A token without a digest is similar to nothing.
  Status add_key_digests(std::uint32_t first_position, std::span<const float> keys,
                         std::uint32_t dim);

  // Per-decision shipping: an interval's attention sums (kernels::IntervalSum with factor
  // score_shipping(params).score_factor) added to positions first_position + i, masked like
  // add_scores but with no recent attention. kInvalidArgument unless completes_interval() (the
  // client ships in the interval's last step, before its end_step), and add_scores' errors.
  Status add_score_sums(std::uint32_t first_position, std::span<const float> sums);
  // The interval's recent-attention sums (factor score_shipping(params).recent_factor), added
  // to recent attention as add_scores adds a step's values. kBadState unless the policy keeps
  // recent attention; otherwise add_score_sums' errors.
  Status add_recent_sums(std::uint32_t first_position, std::span<const float> sums);
  // Per-step shipping: accumulates one step's values as a client would (IntervalSum); nothing is
  // visible before the end_step() that completes the interval. add_scores' errors; nothing is
  // accumulated on error. The accumulators take 4 B per position (8 with recent attention), and
  // only once this path is used.
  Status accumulate_step_scores(std::uint32_t first_position, std::span<const float> values);
  // The client has published `length` positions (its step-end marker says so): the sequence
  // grows to it (new tokens T0, score 0), so between decisions its length, protected window and
  // eviction budget follow the engine's even though scores arrive per interval. Never shrinks.
  // kInvalidArgument for a length beyond max_tokens.
  Status grow_to(std::uint32_t length);
  // True when the running step (step() + 1) is the last of an interval.
  bool completes_interval() const noexcept { return (step_ + 1) % params_.interval == 0; }

  // One decode step finished: the per-step accumulators are folded when the step completes an
  // interval, then step() += 1, then the decay factor is applied (if < 1).
  void end_step();

  // True when step() > 0 and step() % interval == 0 (the paper's (t+1) mod Δ = 0).
  bool due() const noexcept { return step_ > 0 && step_ % params_.interval == 0; }

  // Computes the new assignment from the committed one and leaves it pending.
  // Precondition (aborts): no decision pending.
  const Decision& decide();
  bool has_pending() const noexcept { return pending_.has_value(); }
  // Applies every pending move. Precondition (aborts): has_pending().
  void commit();
  // Applies only `accepted`, which must be a subsequence of the pending moves (e.g. with moves
  // into T1 that got no pool slot removed; those tokens keep their old tier).
  // Precondition (aborts): has_pending() and the subsequence property.
  void commit(std::span<const TierMove> accepted);
  // Discards the pending decision. Precondition (aborts): has_pending().
  void rollback();

  // Leaves a pending decision made of exactly `moves` (Decision: candidates = moves.size(),
  // evict_count = the moves to T3, budgets 0), for the daemon's pressure cascade; commit() or
  // rollback() it like decide()'s. The moves come from daemon logic, yet every one is checked and
  // nothing is left pending on error: kBadState if a decision is pending; kInvalidArgument,
  // naming the move, unless positions are strictly ascending, each is managed (not protected)
  // and currently in move.from, each move is T1 -> T2, T1 -> T3 or T2 -> T3, T1 -> T2 only where
  // the params enable T2 (int8_enabled: a sequence without T2 stays exact), and the moves to T3
  // number at most eviction_headroom().
  Status propose(std::span<const TierMove> moves);

  // How many more tokens may be destroyed now without breaking the eviction budget.
  // kCumulative: max(0, allowed − destroyed()), allowed = evict_tokens, or ⌊evict_ratio·managed()⌋
  // when evict_tokens is 0. The paper modes: the n_evict a decision would take over the current
  // candidates (0 in a kPaperPrototype round that would be skipped).
  std::uint32_t eviction_headroom() const noexcept;

  // Appends to `out` up to k managed (unprotected) tokens now in `tier`, those with the lowest
  // cumulative score, ascending by (score, position): equal scores list the lower position first.
  // Returns the number appended (0 for T3). One pass over the managed range keeping a k-element
  // heap: O(managed · log k) time, no memory beyond out's k new entries. The rare pressure path.
  std::size_t lowest_in_tier(Tier tier, std::size_t k, std::vector<ScoredPosition>& out) const;

  // Preconditions (abort): position < length().
  Tier tier_of(std::uint32_t position) const;
  float score_of(std::uint32_t position) const;  // 0 for T3 tokens
  // Recent attention (token_features.hpp); 0 under policies that keep none and for T3 tokens.
  float recent_of(std::uint32_t position) const;
  bool is_protected(std::uint32_t position) const noexcept;

  std::uint32_t count(Tier tier) const noexcept { return counts_[tier_index(tier)]; }
  std::uint32_t length() const noexcept { return static_cast<std::uint32_t>(tiers_.size()); }
  std::uint32_t prompt_length() const noexcept { return prompt_length_; }
  std::uint32_t max_tokens() const noexcept { return max_tokens_; }
  std::uint64_t step() const noexcept { return step_; }
  std::uint32_t destroyed() const noexcept { return destroyed_; }
  // Size of the managed range: live unprotected tokens + destroyed tokens.
  std::uint32_t managed() const noexcept;
  // destroyed() / managed(); 0 when nothing is managed.
  double destroyed_fraction() const noexcept;
  const TierParams& params() const noexcept { return params_; }
  // Heap bytes held for per-token state (capacity, not length), features and key scratch included.
  std::size_t metadata_bytes() const noexcept;
  // policy_bytes_per_token for this sequence's policy and digest dim.
  std::size_t metadata_bytes_per_token() const noexcept;
  PolicyKind policy() const noexcept { return params_.policy; }

 private:
  // The pending decision's move buffer. Small ones come from the heap; from
  // kMappedMoveBufferBytes (public, above) (where glibc's malloc would mmap fresh pages for every decision
  // anyway) it is a mapping of its own with transparent huge pages requested, so its first touch
  // costs one page fault per 2 MiB instead of one per 4 KiB (at 10M tokens: ~20 instead of
  // ~10,000, most of a decision's extra cost per token over 1M).
  struct MoveBufferRelease {
    // 0: allocated with new[]. No default member initializer: unique_ptr value-initializes it,
    // and one would keep Pending from being default-constructible inside this class.
    std::size_t mapped_bytes;
    void operator()(TierMove* moves) const noexcept;
  };
  using MoveBuffer = std::unique_ptr<TierMove[], MoveBufferRelease>;
  // Uninitialised room for `count` moves.
  static MoveBuffer allocate_moves(std::size_t count);

  struct Pending {
    MoveBuffer moves;
    Decision decision;
  };

  SequenceTiers(std::uint32_t prompt_length, const TierParams& params, std::uint32_t max_tokens);
  void extend_to(std::uint32_t new_length);
  void apply(const TierMove& move);
  // [first, last) of the managed range for the current length.
  std::uint32_t managed_first() const noexcept;
  std::uint32_t managed_last() const noexcept;
  // Unprotected candidates in the managed range, from the tier counts (protected tokens are T0).
  std::uint32_t candidate_count(bool t0_only) const noexcept;
  // The checks of propose(); nothing changes.
  Status check_proposal(std::span<const TierMove> moves) const;
  // add_scores' validation: range and values; nothing changes.
  Status check_scores(std::uint32_t first_position, std::span<const float> values) const;
  // kInvalidArgument naming `what` unless completes_interval().
  Status check_interval_end(const char* what) const;
  // end_step() of an interval's last step: adds the per-step accumulators, then resets them.
  void fold_step_sums();
  // Checks first_position + count against max_tokens; kInvalidArgument naming `what`.
  Status check_range(std::uint32_t first_position, std::size_t count, const char* what) const;

  TierParams params_;
  std::unique_ptr<const RankingPolicy> policy_;
  TokenFeatures features_;
  std::vector<float> key_scratch_;
  std::vector<float> rank_workspace_;  // RankingContext::workspace (r_kv only)
  kernels::IntervalSum step_sums_;                  // per-step path only (empty otherwise)
  std::optional<kernels::IntervalSum> step_recent_;  // with recent attention
  std::uint32_t prompt_length_;
  std::uint32_t max_tokens_;
  std::vector<float> scores_;
  std::vector<Tier> tiers_;
  std::array<std::uint32_t, kTierCount> counts_{};
  std::uint64_t step_ = 0;
  std::uint32_t destroyed_ = 0;
  std::optional<Pending> pending_;
};

}  // namespace kvtier::tier
