// Cut points over a subset of a score array, found by a radix (histogram) select on the IEEE-754
// bit patterns instead of a sort (DESIGN.md §5: a decision over 1M tokens must cost no more than
// one std::nth_element).
//
// Total order: elements are ranked ascending by (score, index). Non-negative floats order like
// their uint32 bit patterns, so the order is that of the 64-bit composite (key << 32 | index):
// equal scores rank by index, lower index first (lower rank). A CutPoint for rank k is the
// element at rank k; exactly the k elements before it in that order are "below" it, which is one
// stateless 64-bit compare per element.
//
// Cost: count() is one streaming pass (12-bit histogram over bits 30..19, four interleaved
// sub-histograms so runs of equal buckets do not serialize). cuts() is one more pass that gathers
// (key, index) of the boundary bucket(s) in index order, then two small histograms (bits 18..8,
// 7..0) and one scan over the gathered elements only; a histogram whose digit all of a bucket's
// elements share is skipped, a bucket of equal keys needs neither, and equal ranks are refined
// once. No sort, no allocation proportional to N except the gathered boundary buckets (all of N
// only when every score falls in one 1/16-octave bucket).
//
// Thread-safety: none; one selector per decision.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <vector>

namespace kvtier::tier {

// Key of an element at or above every possible score: rank == n (everything below).
inline constexpr std::uint32_t kAboveAll = 0xFFFFFFFFu;

// Bit pattern used as the radix key. Precondition: x is +0, positive or +inf (never NaN, never
// negative, never -0: SequenceTiers guarantees this for its scores).
constexpr std::uint32_t score_key(float x) noexcept { return std::bit_cast<std::uint32_t>(x); }

struct CutPoint {
  // The element at the cut's rank (the lowest one not below); {kAboveAll, kAboveAll} if rank == n.
  std::uint32_t key = kAboveAll;
  std::uint32_t index = kAboveAll;

  // True if the element (key, index) ranks below this cut.
  constexpr bool below(std::uint32_t element_key, std::uint32_t element_index) const noexcept {
    return composite(element_key, element_index) < composite(key, index);
  }
  static constexpr std::uint64_t composite(std::uint32_t k, std::uint32_t i) noexcept {
    return (std::uint64_t{k} << 32) | i;
  }
  friend bool operator==(const CutPoint&, const CutPoint&) = default;
};

class CutSelector {
 public:
  CutSelector();

  // Pass 1. Elements i with (tier_mask >> tiers[i]) & 1 are included; an empty `tiers` includes
  // every element. Preconditions (abort): tiers is empty or as long as scores, which has fewer
  // than 2^32 - 1 elements; included scores satisfy score_key's precondition. The spans must stay
  // valid until the last cuts() call.
  // Returns n, the number of included elements.
  std::uint32_t count(std::span<const float> scores, std::span<const std::uint8_t> tiers,
                      std::uint8_t tier_mask);

  // Cut points for ranks[j] (each in [0, n], any order): exactly ranks[j] included elements are
  // below out[j]. Precondition: count() was called; out.size() == ranks.size().
  void cuts(std::span<const std::uint32_t> ranks, std::span<CutPoint> out);

 private:
  static constexpr std::uint32_t kTopBits = 12;
  static constexpr std::uint32_t kTopShift = 19;  // bits 30..19 (bit 31 is the sign, always 0)
  static constexpr std::uint32_t kBuckets = 1u << kTopBits;

  // cuts()' gather pass when every cut falls in `bucket`: its included elements' composites into
  // items (in index order), with the AND and the OR of their keys.
  void gather_one(std::uint32_t bucket, std::uint64_t* items, std::uint32_t& all_keys, std::uint32_t& any_key) const;

  std::vector<std::uint32_t> histogram_;  // kBuckets counts (after count())
  std::span<const float> scores_;
  std::span<const std::uint8_t> tiers_;
  std::uint8_t tier_mask_ = 0;
  std::uint32_t included_ = 0;
};

}  // namespace kvtier::tier
