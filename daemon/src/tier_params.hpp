// The tier engine's parameters as kvtierd fills them: the [tiering] configuration, optionally
// overridden per sequence by the client's OpenSequence. Thread-safety: plain functions.
#pragma once

#include "kvtier/config/config.hpp"
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/tier/tier_params.hpp"

namespace kvtier::daemon {

// The configured defaults; `sequence_salt` (client and sequence ids) gives each sequence its own
// seed for the random and vase policies. kInvalidArgument naming tiering.policy and its value
// when the tier engine knows no policy of that name (config validation refuses such a name
// first; this keeps a name the two lists disagree on from turning into another policy).
Result<tier::TierParams> tier_defaults(const config::TieringSection& tiering, std::uint64_t sequence_salt);

// The client's per-sequence parameters (or the defaults when it sent none), validated, with
// their token counts in the sequence's positions (tokensPerPosition; tier::in_positions).
// kInvalidArgument naming the bad field and its value.
Result<tier::TierParams> tier_params_from_wire(wire::TierParams::Reader wire, const config::TieringSection& tiering,
                                               std::uint64_t sequence_salt);

// What the client needs to ship a sequence's scores per decision (PROTOCOL.md §4 "Score
// shipping"): params' score_shipping and the steps kvtierd counted so far.
void set_shipping(wire::ScoreShipping::Builder out, const tier::TierParams& params, std::uint64_t steps_done);

wire::EvictionMode to_wire(tier::EvictionMode mode);
wire::Policy to_wire(tier::PolicyKind policy);

}  // namespace kvtier::daemon
