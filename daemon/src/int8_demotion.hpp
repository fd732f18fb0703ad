// T1 -> T2 demotion on the daemon's CPU (DESIGN.md §1: the daemon owns both host pools). Before
// a plan that moves tokens into T2 is published, every T2 block it fills is quantized from the
// tokens' T1 rows, layer by layer, with the kernels' CPU reference (quantize.hpp). The client
// only switches its reads when it applies the plan; the T1 rows are freed after its ack.
//
// Safe without locks: the source rows are committed T1 rows (the client writes only fresh
// destination rows), and the destination blocks are fresh (no plan reads them yet).
// Thread-safety: data-plane thread; pure function of its arguments.
#pragma once

#include "kvtier/kernels/quantize.hpp"
#include "kvtier/base/error.hpp"
#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/pool_segment.hpp"
#include "kvtier/tier/plan_transaction.hpp"

namespace kvtier::daemon {

// Quantizes every block of transaction.t2_blocks() from the T1 rows its moves name.
// kInternal when a move into T2 does not come from T1 (the tier engine never plans one).
Status quantize_t2_blocks(const tier::PlanTransaction& transaction, const shm::PoolView& ddr,
                          const shm::Int8PoolView& int8, const kernels::Int8Geometry& geometry);

}  // namespace kvtier::daemon
