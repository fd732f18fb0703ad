// The wire form of a sequence's tier parameters (OpenSequence, Reattach): the numbers of the tier
// parameter table (protocol/tier_param_table.hpp) copied as they are, the choices converted.
// Thread-safety: pure function.
#pragma once

#include "kvtier/kvtier.h"
#include "kvtier/protocol/control.capnp.h"

namespace kvtier::client {

// Mode and policy go out unchecked: kvtierd refuses an unknown one, naming it.
void set_tiering(wire::TierParams::Builder tiering, const kvtier_sequence_options& options);

}  // namespace kvtier::client
