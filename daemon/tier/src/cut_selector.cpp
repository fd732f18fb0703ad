// Radix select: a 12-bit top-level histogram over all included elements, then an exact two-level
// refinement (11 + 8 bits) over the gathered boundary bucket(s), then ties by index order.
#include "kvtier/tier/cut_selector.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>

#include "kvtier/base/check.hpp"

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

// One top-level bucket's (key << 32 | index) composites in index order, with the AND and the OR
// of their keys: a bit set in `varying` differs between two of them, a clear one is shared.
struct Bucket {
  std::span<const std::uint64_t> items;
  std::uint32_t all = 0xFFFFFFFFu;  // AND of the keys
  std::uint32_t any = 0;            // OR of the keys
  std::uint32_t varying() const { return all ^ any; }
};

std::uint32_t key_of(std::uint64_t item) { return static_cast<std::uint32_t>(item >> 32); }

// Exact cut inside one bucket; rank < items.size(). A histogram level whose digit every item
// shares is skipped (its only digit is known from the AND), and when every key is equal the cut is
// items[rank]: ties rank by index and the items are in index order. Every shortcut needs bits
// 31..19 shared, which holds for one bucket's valid (non-negative) keys.
CutPoint refine(const Bucket& bucket, std::uint32_t rank) {
  const std::span<const std::uint64_t> items = bucket.items;
  const std::uint32_t varying = bucket.varying();
  const bool shared_high = (varying >> (kMidShift + 11)) == 0;
  if (varying == 0) return CutPoint{key_of(items[rank]), static_cast<std::uint32_t>(items[rank])};
  std::uint32_t mid_digit = (bucket.all >> kMidShift) & kMidMask;
  if (!shared_high || ((varying >> kMidShift) & kMidMask) != 0) {
    std::array<std::uint32_t, kMidMask + 1> mid{};
    for (std::uint64_t item : items) ++mid[(key_of(item) >> kMidShift) & kMidMask];
    mid_digit = find_digit(mid, rank);
  }

  std::uint32_t key = 0;
  if (shared_high && (varying & kLowMask) == 0) {
    key = (bucket.all & ~((kMidMask << kMidShift) | kLowMask)) | (mid_digit << kMidShift) | (bucket.all & kLowMask);
  } else {
    std::array<std::uint32_t, kLowMask + 1> low{};
    std::uint32_t prefix = 0;  // the bits above 7, shared by every element of this mid digit
    for (std::uint64_t item : items) {
      const std::uint32_t k = key_of(item);
      if (((k >> kMidShift) & kMidMask) == mid_digit) {
        ++low[k & kLowMask];
        prefix = k & ~kLowMask;
      }
    }
    key = prefix | find_digit(low, rank);
  }
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

// The usual case, every cut in one bucket: the cursor and the AND / OR stay in registers.
void CutSelector::gather_one(std::uint32_t bucket, std::uint64_t* items, std::uint32_t& all_keys,
                             std::uint32_t& any_key) const {
  const float* scores = scores_.data();
  const std::uint8_t* tiers = tiers_.empty() ? nullptr : tiers_.data();
  const std::uint32_t mask = tier_mask_;
  const auto n = static_cast<std::uint32_t>(scores_.size());
  std::size_t next = 0;
  std::uint32_t all = 0xFFFFFFFFu, any = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (tiers != nullptr && ((mask >> (tiers[i] & 7)) & 1u) == 0) continue;
    const std::uint32_t key = score_key(scores[i]);
    if (((key >> kTopShift) & (kBuckets - 1)) == bucket) {
      items[next++] = CutPoint::composite(key, i);
      all &= key;
      any |= key;
    }
  }
  all_keys = all;
  any_key = any;
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

  // Pass 2: gather boundary-bucket elements in index order into one buffer, each list sized
  // exactly from the histogram (uninitialized: every entry is written before it is read).
  std::vector<std::size_t> cursor(list_bucket.size() + 1, 0);
  for (std::size_t l = 0; l < list_bucket.size(); ++l) cursor[l + 1] = cursor[l] + histogram_[list_bucket[l]];
  const auto buffer = std::make_unique_for_overwrite<std::uint64_t[]>(cursor.back());
  std::vector<Bucket> lists(list_bucket.size());
  for (std::size_t l = 0; l < lists.size(); ++l) lists[l].items = {buffer.get() + cursor[l], histogram_[list_bucket[l]]};
  if (lists.size() == 1) {
    gather_one(list_bucket[0], buffer.get(), lists[0].all, lists[0].any);
  } else if (!lists.empty()) {
    // Locals, so the stores below cannot make the compiler reload the members every element.
    const float* scores = scores_.data();
    const std::uint8_t* tiers = tiers_.empty() ? nullptr : tiers_.data();
    const std::uint8_t* list_of = list_of_bucket.data();
    std::uint64_t* items = buffer.get();
    std::size_t* next = cursor.data();
    Bucket* bucket = lists.data();
    const std::uint32_t mask = tier_mask_;
    const auto n = static_cast<std::uint32_t>(scores_.size());
    for (std::uint32_t i = 0; i < n; ++i) {
      if (tiers != nullptr && ((mask >> (tiers[i] & 7)) & 1u) == 0) continue;
      const std::uint32_t key = score_key(scores[i]);
      const std::uint8_t l = list_of[(key >> kTopShift) & (kBuckets - 1)];
      if (l != kNone) [[unlikely]] {
        items[next[l]++] = CutPoint::composite(key, i);
        bucket[l].all &= key;
        bucket[l].any |= key;
      }
    }
  }

  for (std::size_t j = 0; j < ranks.size(); ++j) {
    // Equal ranks have equal cuts (without hysteresis decide() asks for the T0 cut twice).
    const auto same = std::find(ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(j), ranks[j]);
    if (same != ranks.begin() + static_cast<std::ptrdiff_t>(j)) {
      out[j] = out[static_cast<std::size_t>(same - ranks.begin())];
    } else if (rank_bucket[j] == kAboveAll) {
      out[j] = CutPoint{kAboveAll, kAboveAll};
    } else {
      out[j] = refine(lists[list_of_bucket[rank_bucket[j]]], rank_rest[j]);
    }
  }
}

}  // namespace kvtier::tier
