// Chain simulation of the eviction-knob semantics: drives a SequenceTiers through one decode
// chain with random scores and reports how much of the chain was destroyed. Used by the unit
// tests (research/seed-algorithms.md §3.4 anchors) and by kvtier-bench.
//
// Model: a prompt of P tokens (prefill scores added once), then `generated` decode steps; step t
// appends token P+t and adds a random score for every position (uniform in [0, 1) / length, an
// attention-row stand-in); end_step(); when due() the decision is taken and committed at once.
// Destroyed counts do not depend on the score values, only on the trigger rules and budgets.
//
// Thread-safety: pure functions (each call owns its state).
#pragma once

#include <cstdint>

#include "kvtier/tier/tier_params.hpp"

namespace kvtier::tier {

struct ChainSimulation {
  double destroyed_fraction = 0.0;   // destroyed tokens / generated tokens
  std::uint32_t destroyed = 0;
  std::uint32_t managed = 0;         // managed range at the end of the chain
  std::uint32_t t0_unprotected = 0;  // T0 tokens outside the protected set at the end
  std::uint32_t t1 = 0;              // T1 tokens at the end
  std::uint32_t decisions = 0;
};

// kInvalidArgument if params fail validate().
Result<ChainSimulation> simulate_chain(const TierParams& params, std::uint32_t prompt,
                                       std::uint32_t generated, std::uint64_t seed);

// simulate_chain with default TierParams except mode, evict_ratio = r and hbm_ratio = beta;
// returns destroyed / generated, or NaN if r or beta is out of [0, 1].
double simulate_destroyed_fraction(EvictionMode mode, double r, double beta, std::uint32_t prompt,
                                   std::uint32_t generated, std::uint64_t seed);

}  // namespace kvtier::tier
