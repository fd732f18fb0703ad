// Validation of the control requests RegisterModel and OpenSequence as pure functions of the
// request and the configuration: everything Session checks before it asks the Server or the
// data plane for anything. Kept apart from Session so that a fuzzer (tests/fuzz) and tests can
// run them without a socket or a Server.
//
// The readers are untrusted input: call inside protocol::capture_protocol_errors (accessors may
// throw kj::Exception). Errors: kInvalidArgument naming the field, kBadState (PROTOCOL.md §4).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>

#include "kvtier/config/config.hpp"
#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/shm/int8_pool_geometry.hpp"
#include "kvtier/shm/pool_geometry.hpp"
#include "kvtier/tier/tier_params.hpp"

namespace kvtier::daemon {

// The KV dtype a client names; nullopt for a value this build does not know.
std::optional<kernels::KvDtype> kernel_dtype(wire::KvDtype dtype);

// What a client asks for at RegisterModel, after the session validated it.
struct PoolRequest {
  shm::PoolGeometry ddr;
  std::optional<shm::Int8PoolGeometry> int8;  // none: no T2 for this client
  kernels::KvDtype dtype = kernels::KvDtype::kF16;
  std::uint32_t weight = 1;  // clamped to [1, pools.max_client_weight]
};

// RegisterModel: dtype, KV geometry and int8 pool (pools.int8_group_tokens per block), weight
// clamped. Precondition: `pools` passed config::validate. The byte caps are the Server's.
Result<PoolRequest> pool_request_from_wire(wire::RegisterModel::Reader request, const config::PoolsSection& pools);

// What an OpenSequence asks for, validated.
struct OpenRequest {
  std::uint32_t prompt_length = 0;
  tier::TierParams params;      // the int8 budget cleared where the node default asks for T2
  std::uint32_t digest_dim = 0;  // never 0: the default replaces it
};

// OpenSequence, all but the per-client sequence count: prompt length against
// limits.max_tokens_per_sequence, the tier parameters (tier_params_from_wire), the int8 budget
// against `has_int8_pool` (kBadState when the client asks for T2 without a pool) and the key
// digest width. `sequence_salt` seeds the random policies (tier_defaults).
Result<OpenRequest> open_request_from_wire(wire::OpenSequence::Reader request, const config::DaemonConfig& config,
                                           bool has_int8_pool, std::uint64_t sequence_salt);
// The same checks for a sequence's prompt length and tier parameters given apart (Reattach).
Result<OpenRequest> open_request_from_wire(std::uint32_t prompt_length, wire::TierParams::Reader tiering,
                                           const config::DaemonConfig& config, bool has_int8_pool,
                                           std::uint64_t sequence_salt);

}  // namespace kvtier::daemon
