// Storage tier of one token: where its KV lives (DESIGN.md §1).
//
//   kT0  the engine's own HBM KV cache (native precision)
//   kT1  daemon DDR pool, bit-exact copy (staged into HBM for attention)
//   kT2  daemon int8 pool (lossy; filled from T1 only, never back to T1; see sequence_tiers.hpp)
//   kT3  nowhere: destroyed, never comes back
//
// The numeric values travel in plans (PlanMove::from_tier / to_tier) and are stored one byte per
// token: they are the wire's tier codes of shm/records.hpp, the one definition.
// Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvtier/shm/records.hpp"

namespace kvtier::tier {

enum class Tier : std::uint8_t {
  kT0 = shm::kTierHbm,
  kT1 = shm::kTierDdr,
  kT2 = shm::kTierInt8,
  kT3 = shm::kTierDropped,
};

inline constexpr std::size_t kTierCount = 4;

// "T0".."T3"; "T?" for a value outside the enum.
constexpr std::string_view tier_name(Tier tier) noexcept {
  switch (tier) {
    case Tier::kT0: return "T0";
    case Tier::kT1: return "T1";
    case Tier::kT2: return "T2";
    case Tier::kT3: return "T3";
  }
  return "T?";
}

constexpr std::size_t tier_index(Tier tier) noexcept { return static_cast<std::size_t>(tier); }

// A token whose KV still exists somewhere (T0, T1 or T2).
constexpr bool is_live(Tier tier) noexcept { return tier != Tier::kT3; }

}  // namespace kvtier::tier
