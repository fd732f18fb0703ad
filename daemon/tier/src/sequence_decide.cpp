// SequenceTiers::decide(): budgets per eviction mode, the policy's ranking keys, cut points by
// radix select over the keys, then one classify-and-emit pass over the managed range (see
// sequence_tiers.hpp for the contract).
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "budget.hpp"
#include "kvtier/base/check.hpp"
#include "kvtier/tier/cut_selector.hpp"
#include "kvtier/tier/sequence_tiers.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

// Which elements of a block keep their tier for certain, from their keys and tiers alone: a
// non-candidate; a T0 candidate below none of the cuts (its key above the highest cut's, or equal
// to it with the block starting at or after that cut's index); in the three-tier pass also a T1 candidate whose key lies strictly between the evict and T0 cut keys.
// Such an element emits no move and evicts nothing, so a block made only of them is skipped
// whole: in a steady state most of the range is. Keys compare as int32: every valid key is
// below 2^31, and a threshold at or above it is clamped to INT32_MAX, which only makes a test
// stricter (an element that fails goes through the full per-element pass).
class KeepTest {
 public:
  static constexpr std::uint32_t kBlock = 16;

  KeepTest(const ClassifyInput& in, bool int8) noexcept {
    const auto composite = [](CutPoint c) { return CutPoint::composite(c.key, c.index); };
    CutPoint top = composite(in.evict_cut) < composite(in.t0_cut) ? in.t0_cut : in.evict_cut;
    if (int8 && composite(top) < composite(in.t2_cut)) top = in.t2_cut;
    above_ = clamp(top.key);
    // Equal keys rank by index; a clamped key matches no valid key, so it allows no tie.
    tie_from_ = top.key <= 0x7FFFFFFFu ? top.index : kAboveAll;
    t1_low_ = clamp(in.evict_cut.key);
    t1_high_ = clamp(in.t0_cut.key);
    for (std::uint32_t t = 0; t < 4; ++t) candidate_[t] = ((in.mask >> t) & 1u) != 0;
  }

  // True when every element of keys[0, kBlock) / tiers[0, kBlock) keeps its tier; `first` is the
  // index of keys[0] in the range. The key tests run on 4 lanes of 32 bits, then pack to bytes
  // to meet the tier tests, which run on all 16 tier bytes at once.
  template <bool kAllCandidates, bool kInt8>
  bool block(const float* keys, const Tier* tiers, std::uint32_t first) const noexcept {
#if defined(__SSE2__)
    const __m128i above = _mm_set1_epi32(above_);
    const __m128i tie = first >= tie_from_ ? _mm_set1_epi32(-1) : _mm_setzero_si128();
    const __m128i t1_low = _mm_set1_epi32(t1_low_);
    const __m128i t1_high = _mm_set1_epi32(t1_high_);
    __m128i not_below[4];
    __m128i between[4];
    for (std::uint32_t q = 0; q < 4; ++q) {
      const __m128i k = _mm_castps_si128(_mm_loadu_ps(keys + 4 * q));
      not_below[q] = _mm_or_si128(_mm_cmpgt_epi32(k, above), _mm_and_si128(tie, _mm_cmpeq_epi32(k, above)));
      between[q] = _mm_and_si128(_mm_cmpgt_epi32(k, t1_low), _mm_cmpgt_epi32(t1_high, k));
    }
    const auto bytes = [](const __m128i* lanes) {
      return _mm_packs_epi16(_mm_packs_epi32(lanes[0], lanes[1]), _mm_packs_epi32(lanes[2], lanes[3]));
    };
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tiers));
    __m128i keep = _mm_and_si128(_mm_cmpeq_epi8(t, _mm_setzero_si128()), bytes(not_below));
    if constexpr (!kInt8) keep = _mm_or_si128(keep, _mm_and_si128(_mm_cmpeq_epi8(t, _mm_set1_epi8(1)), bytes(between)));
    if constexpr (!kAllCandidates) {
      for (std::uint32_t code = 0; code < 4; ++code) {
        if (!candidate_[code]) keep = _mm_or_si128(keep, _mm_cmpeq_epi8(t, _mm_set1_epi8(static_cast<char>(code))));
      }
    }
    return _mm_movemask_epi8(keep) == 0xFFFF;
#else
    (void)keys;
    (void)tiers;
    (void)first;
    return false;
#endif
  }

 private:
  static std::int32_t clamp(std::uint32_t key) noexcept {
    return static_cast<std::int32_t>(std::min<std::uint32_t>(key, 0x7FFFFFFFu));
  }
  std::int32_t above_ = 0, t1_low_ = 0, t1_high_ = 0;
  std::uint32_t tie_from_ = kAboveAll;  // blocks from this index on tie with the highest cut
  bool candidate_[4] = {};  // by tier code
};

// The classify-and-emit pass. Branch-free in the common case (cut points fall at random places
// in score order, so branches would mispredict): every element is written at out[moves] and kept
// only if its tier changed. kAllCandidates: every element of the range is a candidate (no mask
// test). kHysteresis: apply the margin rule. kInt8: the T2 cut and the two T2 rules (see
// sequence_tiers.hpp); off, the pass is exactly the three-tier one. Without hysteresis, blocks
// that KeepTest proves unchanged are skipped.
template <bool kAllCandidates, bool kHysteresis, bool kInt8>
ClassifyCounts classify(const ClassifyInput& in, TierMove* out) {
  ClassifyCounts counts;
  const auto element = [&](std::uint32_t i) {
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
  };
  std::uint32_t i = 0;
  if constexpr (!kHysteresis) {
    const KeepTest keep(in, kInt8);
    for (; i + KeepTest::kBlock <= in.size; i += KeepTest::kBlock) {
      if (keep.block<kAllCandidates, kInt8>(in.scores + i, in.tiers + i, i)) continue;
      for (std::uint32_t j = i; j < i + KeepTest::kBlock; ++j) element(j);
    }
  }
  for (; i < in.size; ++i) element(i);
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
