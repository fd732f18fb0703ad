// The sequences of a Reattach (PROTOCOL.md §4 "Reattachment"), rebuilt from the client's record
// of its placement and checked against the pools it claims before anything is adopted.
#pragma once

#include <cstdint>
#include <vector>

#include "kvtier/config/config.hpp"
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/tier/sequence_tiers.hpp"
#include "kvtier/tier/slot_map.hpp"
#include "request_checks.hpp"

namespace kvtier::daemon {

struct RestoredSequence {
  std::uint32_t sequence_id = 0;
  tier::SequenceTiers tiers;
  tier::SlotMap t1, t2;  // committed pool slots, as the client holds them
  std::uint32_t digest_dim = 0;
  std::uint64_t rows() const { return tiers.count(tier::Tier::kT1) + tiers.count(tier::Tier::kT2); }
};

// Every sequence of `request`, checked: at most limits.max_sequences_per_client, distinct
// non-zero ids, each list pair of equal length and ascending, parameters as OpenSequence takes
// them, the tiers as SequenceTiers::restore takes them, T1 slots below the pool's slots and T2
// slots below the int8 pool's, no slot held twice in the client. kInvalidArgument (kLimitExceeded
// for the count) naming the sequence and what is wrong; nothing is built then.
Result<std::vector<RestoredSequence>> restore_sequences(wire::Reattach::Reader request, const PoolRequest& pools,
                                                        const config::DaemonConfig& config, std::uint32_t client_id);

}  // namespace kvtier::daemon
