// The tier engine's parameters as kvtierd fills them: the [tiering] configuration, optionally
// overridden per sequence by the client's OpenSequence. Thread-safety: plain functions.
#pragma once

#include "kvtier/config/config.hpp"
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/tier/tier_params.hpp"

namespace kvtier::daemon {

tier::TierParams tier_defaults(const config::TieringSection& tiering);

// The client's per-sequence parameters (or the defaults when it sent none), validated.
// kInvalidArgument naming the bad field.
Result<tier::TierParams> tier_params_from_wire(wire::TierParams::Reader wire, const config::TieringSection& tiering);

wire::EvictionMode to_wire(tier::EvictionMode mode);

}  // namespace kvtier::daemon
