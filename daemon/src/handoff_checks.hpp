// The sequence hand-off's checks of untrusted input (handoff.hpp, PROTOCOL.md "Sequence
// hand-off") as pure functions: the exporter's cache description and T0 list (Session, on
// ExportSequence), the T0 list against the daemon's tiers (ClientChannel::freeze), the adopter's
// geometry (Session, on AdoptSequence) and its room (ClientChannel::can_adopt). Kept apart so
// that tests and the fuzzer (tests/fuzz/handoff_fuzz.cpp) run them without sessions or channels.
//
// Wire readers may throw kj::Exception: call inside protocol::capture_protocol_errors.
// Errors: kInvalidArgument naming the field, kLimitExceeded / kBadState naming what is missing.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "export_registry.hpp"
#include "handoff.hpp"
#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/shm/pool_geometry.hpp"
#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::daemon {

// (position, exporter cache slot) of each T0 token, positions ascending.
using T0List = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

// The exported cache must describe the registered geometry (`geometry`, `dtype`) and lie inside
// its buffer: a known buffer kind with the ipc handle it needs, one K and one V offset per layer,
// 1 <= bytes <= 2^48, a valid KvLayout (kernels::validate) over those offsets, and every layer's
// K and V extent inside `bytes`. The daemon never maps the buffer.
Status check_exported_cache(wire::ExportedCache::Reader cache, const shm::PoolGeometry& geometry,
                            kernels::KvDtype dtype);

// ExportSequence's t0Positions/t0Slots as pairs: equally long, positions strictly ascending,
// every slot below the cache's `num_slots`.
Result<T0List> t0_list_from_wire(capnp::List<std::uint32_t>::Reader positions,
                                 capnp::List<std::uint32_t>::Reader slots, std::uint32_t num_slots);

// The list must be exactly the positions `tiers` has in T0 (kInvalidArgument naming the first
// position that is missing or extra). Precondition: positions ascend (t0_list_from_wire).
Status check_t0_matches(const tier::SequenceTiers& tiers, std::span<const std::pair<std::uint32_t, std::uint32_t>> t0);

// An adopter's model must have the exporter's geometry and dtype (kInvalidArgument naming the
// field and both values).
Status check_adopter_geometry(const shm::PoolGeometry& mine, wire::KvDtype my_dtype,
                              const ExportRegistry::Entry& exported);

// What an adopting client has room for right now.
struct AdopterRoom {
  std::uint64_t row_bytes = 0;          // its pool rows
  std::uint32_t plan_ring_records = 0;  // its plan ring's capacity
  std::uint32_t free_rows = 0;          // T1 slots free
  std::optional<std::uint32_t> int8_group;  // none: it registered no int8 pool
  std::uint32_t free_int8_blocks = 0;
};

// The hand-off plan goes out whole, so it must fit the plan ring; the T1 rows and T2 blocks need
// free slots of the same row size and int8 block size.
Status check_adopt_room(const HandoffNeeds& needs, const AdopterRoom& room);

}  // namespace kvtier::daemon
