// Radix select: a 12-bit top-level histogram over all included elements, then an exact two-level
// refinement (11 + 8 bits) over the gathered boundary bucket(s), then ties by index order.
#include "kvtier/tier/cut_selector.hpp"

#include <algorithm>
#include <array>
#include <cstddef>

#include "kvtier/protocol/check.hpp"

namespace kvtier::tier {
namespace {

constexpr std::uint32_t kMidShift = 8;
constexpr std::uint32_t kMidMask = 0x7FF;  // bits 18..8
constexpr std::uint32_t kLowMask = 0xFF;   // bits 7..0

// First digit d whose cumulative count exceeds `rank`; rank becomes the rank inside bucket d.
template <std::size_t N>
std::uint32_t find_digit(const std::array<std::uint32_t, N>& hist, std::uint32_t& rank) {
  for (std::uint32_t d = 0; d < N; ++d) {
    if (rank < hist[d]) return d;
    rank -= hist[d];
  }
  KVTIER_FAIL("cut rank beyond the gathered bucket");
}

// Exact cut inside one top-level bucket. `items` are that bucket's (key << 32 | index)
// composites in index order; rank < items.size().
CutPoint refine(std::span<const std::uint64_t> items, std::uint32_t rank) {
  auto key_of = [](std::uint64_t item) { return static_cast<std::uint32_t>(item >> 32); };
  std::array<std::uint32_t, kMidMask + 1> mid{};
  for (std::uint64_t item : items) ++mid[(key_of(item) >> kMidShift) & kMidMask];
  const std::uint32_t mid_digit = find_digit(mid, rank);

  std::array<std::uint32_t, kLowMask + 1> low{};
  std::uint32_t prefix = 0;  // the bits above 7, shared by every element of this mid digit
  for (std::uint64_t item : items) {
    const std::uint32_t key = key_of(item);
    if (((key >> kMidShift) & kMidMask) == mid_digit) {
      ++low[key & kLowMask];
      prefix = key & ~kLowMask;
    }
  }
  const std::uint32_t key = prefix | find_digit(low, rank);
  // What is left of the rank counts equal keys before the cut (ties rank by index): the cut is
  // the (rank+1)-th element with this key in index order.
  for (std::uint64_t item : items) {
    if (key_of(item) == key && rank-- == 0) {
      return CutPoint{key, static_cast<std::uint32_t>(item)};
    }
  }
  KVTIER_FAIL("cut element not found in its bucket");
}

}  // namespace

CutSelector::CutSelector() : histogram_(kBuckets) {}

std::uint32_t CutSelector::count(std::span<const float> scores,
                                 std::span<const std::uint8_t> tiers, std::uint8_t tier_mask) {
  KVTIER_CHECK(tiers.empty() || tiers.size() == scores.size(), "tiers/scores size mismatch");
  KVTIER_CHECK(scores.size() < kAboveAll, "2^32 - 1 or more scores");
  scores_ = scores;
  tiers_ = tiers;
  tier_mask_ = tier_mask;

  // Four sub-histograms: consecutive elements usually share a bucket, and a single table would
  // serialize on the load-add-store of that one counter.
  std::vector<std::uint32_t> sub(4 * kBuckets, 0);
  std::uint32_t* h0 = sub.data();
  std::uint32_t* h1 = h0 + kBuckets;
  std::uint32_t* h2 = h1 + kBuckets;
  std::uint32_t* h3 = h2 + kBuckets;
  const std::size_t n = scores.size();
  const float* s = scores.data();
  auto bucket = [](float x) { return (score_key(x) >> kTopShift) & (kBuckets - 1); };
  std::size_t i = 0;
  if (tiers.empty()) {
    for (; i + 4 <= n; i += 4) {
      ++h0[bucket(s[i])];
      ++h1[bucket(s[i + 1])];
      ++h2[bucket(s[i + 2])];
      ++h3[bucket(s[i + 3])];
    }
    for (; i < n; ++i) ++h0[bucket(s[i])];
  } else {
    const std::uint8_t* t = tiers.data();
    auto in = [tier_mask](std::uint8_t tier) -> std::uint32_t { return (tier_mask >> (tier & 7)) & 1u; };
    for (; i + 4 <= n; i += 4) {
      h0[bucket(s[i])] += in(t[i]);
      h1[bucket(s[i + 1])] += in(t[i + 1]);
      h2[bucket(s[i + 2])] += in(t[i + 2]);
      h3[bucket(s[i + 3])] += in(t[i + 3]);
    }
    for (; i < n; ++i) h0[bucket(s[i])] += in(t[i]);
  }
  std::uint64_t total = 0;
  for (std::uint32_t b = 0; b < kBuckets; ++b) {
    histogram_[b] = h0[b] + h1[b] + h2[b] + h3[b];
    total += histogram_[b];
  }
  KVTIER_CHECK(total <= 0xFFFFFFFFu, "more than 2^32 included elements");
  included_ = static_cast<std::uint32_t>(total);
  return included_;
}

void CutSelector::cuts(std::span<const std::uint32_t> ranks, std::span<CutPoint> out) {
  KVTIER_CHECK(ranks.size() == out.size(), "ranks/out size mismatch");

  // Locate every rank's top-level bucket; distinct boundary buckets get a gather list each.
  constexpr std::uint8_t kNone = 0xFF;
  std::vector<std::uint8_t> list_of_bucket(kBuckets, kNone);
  std::vector<std::uint32_t> list_bucket;                 // bucket of each gather list
  std::vector<std::uint32_t> rank_bucket(ranks.size());   // kAboveAll for rank == n
  std::vector<std::uint32_t> rank_rest(ranks.size());     // rank inside its bucket
  for (std::size_t j = 0; j < ranks.size(); ++j) {
    KVTIER_CHECK(ranks[j] <= included_, "cut rank beyond the included count");
    if (ranks[j] == included_) {
      rank_bucket[j] = kAboveAll;
      continue;
    }
    std::uint32_t rest = ranks[j];
    std::uint32_t b = 0;
    while (rest >= histogram_[b]) rest -= histogram_[b++];
    rank_bucket[j] = b;
    rank_rest[j] = rest;
    if (list_of_bucket[b] == kNone) {
      KVTIER_CHECK(list_bucket.size() < kNone, "too many cut ranks");
      list_of_bucket[b] = static_cast<std::uint8_t>(list_bucket.size());
      list_bucket.push_back(b);
    }
  }

  // Pass 2: gather boundary-bucket elements in index order (sized exactly from the histogram).
  std::vector<std::vector<std::uint64_t>> lists(list_bucket.size());
  for (std::size_t l = 0; l < lists.size(); ++l) lists[l].reserve(histogram_[list_bucket[l]]);
  if (!lists.empty()) {
    // Locals, so the pushes below cannot make the compiler reload the members every element.
    const float* scores = scores_.data();
    const std::uint8_t* tiers = tiers_.empty() ? nullptr : tiers_.data();
    const std::uint8_t* list_of = list_of_bucket.data();
    const std::uint32_t mask = tier_mask_;
    const auto n = static_cast<std::uint32_t>(scores_.size());
    for (std::uint32_t i = 0; i < n; ++i) {
      if (tiers != nullptr && ((mask >> (tiers[i] & 7)) & 1u) == 0) continue;
      const std::uint32_t key = score_key(scores[i]);
      const std::uint8_t l = list_of[(key >> kTopShift) & (kBuckets - 1)];
      if (l != kNone) [[unlikely]] lists[l].push_back(CutPoint::composite(key, i));
    }
  }

  for (std::size_t j = 0; j < ranks.size(); ++j) {
    if (rank_bucket[j] == kAboveAll) {
      out[j] = CutPoint{kAboveAll, kAboveAll};
    } else {
      out[j] = refine(lists[list_of_bucket[rank_bucket[j]]], rank_rest[j]);
    }
  }
}

}  // namespace kvtier::tier
