// SequenceTiers::decide(): budgets per eviction mode, the policy's ranking keys, cut points by
// radix select over the keys, then one classify-and-emit pass over the managed range (see
// sequence_tiers.hpp for the contract).
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdint>

#include "budget.hpp"
#include "kvtier/protocol/check.hpp"
#include "kvtier/tier/cut_selector.hpp"
#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::tier {
namespace {

constexpr std::uint8_t bit(Tier tier) { return static_cast<std::uint8_t>(1u << tier_index(tier)); }

struct ClassifyInput {
  const float* scores;  // ranking keys of the managed range
  const Tier* tiers;
  std::uint32_t size;
  std::uint32_t first;  // absolute position of scores[0]
  std::uint8_t mask;    // candidate tiers
  CutPoint evict_cut;   // below: T3
  CutPoint t0_cut;      // below (and not evicted): T1 in the plain split
  CutPoint t2_cut;      // below (and not evicted): T2 in the plain split (kInt8 only)
  double lower;         // hysteresis: a T0 token below this is demoted
  double upper;         // hysteresis: a T1/T2 token above this is promoted
};

struct ClassifyCounts {
  std::uint32_t moves = 0;
  std::uint32_t evicted = 0;
  std::uint32_t held = 0;
};

// The classify-and-emit pass. Branch-free in the common case (cut points fall at random places
// in score order, so branches would mispredict): every element is written at out[moves] and kept
// only if its tier changed. kAllCandidates: every element of the range is a candidate (no mask
// test). kHysteresis: apply the margin rule. kInt8: the T2 cut and the two T2 rules (see
// sequence_tiers.hpp); off, the pass is exactly the three-tier one.
template <bool kAllCandidates, bool kHysteresis, bool kInt8>
ClassifyCounts classify(const ClassifyInput& in, TierMove* out) {
  ClassifyCounts counts;
  for (std::uint32_t i = 0; i < in.size; ++i) {
    const Tier old_tier = in.tiers[i];
    const auto old_code = static_cast<std::uint32_t>(old_tier);
    const std::uint32_t candidate = kAllCandidates ? 1u : (in.mask >> old_code) & 1u;
    const float score = in.scores[i];
    const std::uint32_t key = score_key(score);
    const std::uint32_t evict = in.evict_cut.below(key, i) ? candidate : 0u;
    const std::uint32_t demote = in.t0_cut.below(key, i) ? candidate : 0u;
    std::uint32_t new_code;
    if constexpr (kInt8) {
      // The cuts nest (evict <= T2 <= T0 rank), so the sum is 3 = T3, 2 = T2, 1 = T1, 0 = T0.
      const std::uint32_t quantize = in.t2_cut.below(key, i) ? candidate : 0u;
      new_code = evict + quantize + demote;
      // T2 is reached only from T1 (a T0 token stops in T1), and a T2 token never returns to T1.
      new_code -= (old_code == 0 && new_code == 2) ? 1u : 0u;
      new_code += (old_code == 2 && new_code == 1) ? 1u : 0u;
    } else {
      // Below the evict cut implies below the T0 cut: 0 = T0, 1 = T1, 3 = T3.
      new_code = 2 * evict + demote;
    }
    if constexpr (kHysteresis) {
      if (candidate != 0 && evict == 0) {
        const std::uint32_t plain = new_code;
        const auto s = static_cast<double>(score);
        // Where a held or demoted token sits outside T0: T1, or its T2 place (kInt8).
        std::uint32_t off_t0 = 1u;
        if constexpr (kInt8) off_t0 = old_code == 2 ? 2u : std::max(plain, 1u);
        new_code = old_tier == Tier::kT0 ? (s < in.lower ? 1u : 0u) : (s > in.upper ? 0u : off_t0);
        counts.held += new_code != plain ? 1u : 0u;
      }
    }
    if constexpr (!kAllCandidates) new_code = candidate != 0 ? new_code : old_code;
    counts.evicted += evict;
    out[counts.moves] = TierMove{in.first + i, old_tier, static_cast<Tier>(new_code)};
    counts.moves += new_code != old_code ? 1u : 0u;
  }
  return counts;
}

// Direct calls (not a table of pointers), so each instantiation can be inlined into decide()
// as before T2 existed: the three-tier path keeps its exact code.
template <bool kAllCandidates, bool kHysteresis>
ClassifyCounts classify_with(bool int8, const ClassifyInput& input, TierMove* out) {
  return int8 ? classify<kAllCandidates, kHysteresis, true>(input, out)
              : classify<kAllCandidates, kHysteresis, false>(input, out);
}

constexpr std::size_t kHugePage = std::size_t{2} << 20;

}  // namespace

void SequenceTiers::MoveBufferRelease::operator()(TierMove* moves) const noexcept {
  if (mapped_bytes == 0) {
    delete[] moves;
  } else {
    ::munmap(moves, mapped_bytes);
  }
}

SequenceTiers::MoveBuffer SequenceTiers::allocate_moves(std::size_t count) {
  const std::size_t bytes = count * sizeof(TierMove);
  if (bytes >= kMappedMoveBufferBytes) {
    // Map one huge page more than needed and trim both ends, so the buffer starts on a 2 MiB
    // boundary (THP only backs aligned 2 MiB ranges).
    const std::size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* raw = ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw != MAP_FAILED) {
      const auto base = reinterpret_cast<std::uintptr_t>(raw);
      const std::uintptr_t start = (base + kHugePage - 1) & ~(kHugePage - 1);
      const std::uintptr_t end = base + size + kHugePage;
      if (start > base) ::munmap(raw, start - base);
      if (end > start + size) ::munmap(reinterpret_cast<void*>(start + size), end - start - size);
      // Advice only: where THP is off, the buffer simply gets 4 KiB pages.
      ::madvise(reinterpret_cast<void*>(start), size, MADV_HUGEPAGE);
      return MoveBuffer(reinterpret_cast<TierMove*>(start), MoveBufferRelease{size});
    }
    // No mapping: fall back to the heap, which reports exhaustion as the rest of decide() does.
  }
  return MoveBuffer(new TierMove[count], MoveBufferRelease{0});
}

const Decision& SequenceTiers::decide() {
  KVTIER_CHECK(!pending_.has_value(), "decide() while a decision is pending");
  const std::uint32_t first = managed_first();
  const std::uint32_t size = managed_last() - first;
  const float* scores = scores_.data() + first;
  const Tier* tiers = tiers_.data() + first;
  const bool prototype = params_.mode == EvictionMode::kPaperPrototype;
  // The prototype never looks at T1 again; the other modes rank every live token.
  const std::uint8_t mask = prototype ? bit(Tier::kT0)
                                      : static_cast<std::uint8_t>(bit(Tier::kT0) | bit(Tier::kT1) |
                                                                  bit(Tier::kT2));

  // The candidate count comes from the tier counts, so budgets are known before the policy ranks
  // (vase sizes its reservation from n_hbm); the selector's count must agree.
  const std::uint32_t n = candidate_count(prototype);
  Pending& pending = pending_.emplace();
  Decision& d = pending.decision;
  d.candidates = n;
  if (prototype && n < kPrototypeMinCandidates) {
    d.skipped = true;
    return d;
  }
  const detail::Budget budget = detail::budget_for(params_, n, managed(), destroyed_);
  d.hbm_budget = budget.hbm;
  d.int8_budget = budget.int8;

  RankingContext ctx;
  ctx.scores = {scores, size};
  ctx.tiers = {tiers, size};
  ctx.recent = features_.recent(first, size);
  ctx.value_ranges = features_.value_ranges(first, size);
  ctx.digests = features_.ranked_digests(first, first + size, length());
  ctx.first_position = first;
  ctx.candidate_mask = mask;
  ctx.candidates = n;
  ctx.hbm_budget = budget.hbm;
  ctx.evict_budget = budget.evict;
  ctx.step = step_;
  ctx.params = &params_;
  ctx.workspace = &rank_workspace_;
  const std::span<const float> keys = policy_->rank(ctx, key_scratch_);
  KVTIER_CHECK(keys.size() == size, "policy returned keys for a different range");

  CutSelector selector;
  const std::uint32_t counted =
      selector.count(keys, {reinterpret_cast<const std::uint8_t*>(tiers), size}, mask);
  KVTIER_CHECK(counted == n, "candidate count disagrees with the tier counts");

  // Below cut[0]: T3. Below cut[1] (and not below cut[0]): T1 in the plain split. cut[2] is
  // the highest plain-T1 survivor, needed only for hysteresis. cut[3], only when T2 is in play:
  // below it (and not below cut[0]) T2 in the plain split.
  const std::uint32_t survivors = n - budget.evict;
  const bool hysteresis = !prototype && params_.hysteresis > 0.0 &&
                          policy_traits(params_.policy).supports_hysteresis && budget.hbm > 0 &&
                          budget.hbm < survivors;
  // The T2 pass also runs with a zero budget while T2 tokens exist: they must not return to T1.
  const bool int8 = budget.int8 > 0 || count(Tier::kT2) > 0;
  const std::uint32_t t0_rank = n - budget.hbm;
  const std::uint32_t ranks[4] = {budget.evict, t0_rank, hysteresis ? t0_rank - 1 : t0_rank,
                                  budget.evict + budget.int8};
  CutPoint cut[4];
  const std::size_t cut_count = int8 ? 4 : 3;
  selector.cuts({ranks, cut_count}, {cut, cut_count});

  double lower = 0.0;
  double upper = 0.0;
  if (hysteresis) {
    // Both are real elements here (0 < survivors - hbm < survivors): the lowest survivor the
    // plain split keeps in T0 and the highest it leaves outside T0 (in T1, or T2 if T2 takes all).
    const auto lowest_t0 = static_cast<double>(std::bit_cast<float>(cut[1].key));
    const auto highest_t1 = static_cast<double>(std::bit_cast<float>(cut[2].key));
    lower = lowest_t0 * (1.0 - params_.hysteresis);
    upper = highest_t1 * (1.0 + params_.hysteresis);
  }

  // At most one move per candidate; classify() writes every element at out[moves] and keeps only
  // moves, so the buffer needs one spare entry beyond the candidates.
  pending.moves = allocate_moves(std::size_t{n} + 1);
  TierMove* out = pending.moves.get();
  // cut[3] is unset (never read) when the T2 pass is off.
  const ClassifyInput input{keys.data(), tiers, size, first, mask,
                            cut[0], cut[1], cut[3], lower, upper};
  const bool all = n == size;
  const ClassifyCounts counts =
      hysteresis ? (all ? classify_with<true, true>(int8, input, out)
                        : classify_with<false, true>(int8, input, out))
                 : (all ? classify_with<true, false>(int8, input, out)
                        : classify_with<false, false>(int8, input, out));
  KVTIER_CHECK(counts.evicted == budget.evict, "classify pass disagrees with the evict cut");
  d.moves = {out, counts.moves};
  d.evict_count = counts.evicted;
  d.hysteresis_held = counts.held;
  return d;
}

}  // namespace kvtier::tier
