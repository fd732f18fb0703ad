// One token's tier change, as a decision emits it and a plan carries it.
// Thread-safety: plain value.
#pragma once

#include <cstdint>

#include "kvtier/tier/tier.hpp"

namespace kvtier::tier {

// No default member initializers on purpose: decide() allocates its move buffer for every
// candidate with make_unique_for_overwrite and must not pay for (and page-fault) zeroing the
// part it never uses. Write TierMove{} for a zeroed value.
struct TierMove {
  std::uint32_t position;  // absolute token position in the sequence
  Tier from;
  Tier to;
  friend bool operator==(const TierMove&, const TierMove&) = default;
};

}  // namespace kvtier::tier
