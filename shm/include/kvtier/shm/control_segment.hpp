// Creating a control segment (daemon) and building the role views over it (daemon and client).
//
// The daemon builds its views from its own ControlLayout (never re-read from shared memory);
// the client, and a daemon adopting a segment after a restart, first copy the ControlBlock out
// and validate it against the mapping (ControlLayout::from_block). Thread-safety: the returned
// views follow score_ring.hpp / plan_ring.hpp; the segment or mapping must outlive them.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kvtier/base/error.hpp"
#include "kvtier/shm/control_layout.hpp"
#include "kvtier/shm/mapping.hpp"
#include "kvtier/shm/plan_ring.hpp"
#include "kvtier/shm/score_ring.hpp"
#include "kvtier/shm/segment.hpp"

namespace kvtier::shm {

struct DaemonRings {
  ScoreConsumer scores;
  PlanProducer plans;
};

struct ClientRings {
  ScoreProducer scores;
  PlanConsumer plans;
};

// Segment::create(kControl) with the ControlBlock and both ring headers initialised before
// `ready` is published.
Result<Segment> create_control_segment(std::string name, const ControlLayout& layout,
                                       std::uint64_t epoch, std::uint32_t client_id);

// Copies the ControlBlock out of `segment` (a whole control segment) and validates it.
// kProtocol when the segment is too small for it or any field is inconsistent.
Result<ControlLayout> read_control_layout(std::span<const std::byte> segment);

// Daemon. Preconditions: `segment` is a control segment at least layout.bytes() long, created
// with `layout` (or adopted and validated with read_control_layout).
DaemonRings daemon_rings(const Segment& segment, const ControlLayout& layout);

// Client: read_control_layout over the mapping, then the views. Errors as read_control_layout,
// plus kProtocol when the mapping is not a control segment.
Result<ClientRings> client_rings(const Mapping& mapping);

}  // namespace kvtier::shm
