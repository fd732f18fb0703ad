// Sequence hand-off between two engine clients (protocol 1.2, PROTOCOL.md "Sequence hand-off").
//
//   exporter  ExportSequence  -> the data plane freezes the sequence (no more decisions), checks
//                                the T0 list against its tiers and keeps each T0 token's cache
//                                slot; the Server files the export under a fresh token.
//   adopter   AdoptSequence   -> the data plane lends the exporter's tier state to the adopter's
//                                channel, which copies the T1 rows and T2 blocks into its own
//                                pools and queues the hand-off plan (peer -> T0/T1/T2 moves).
//   adopter acks the plan     -> applied: the exporter's host rows are freed (handed off);
//                                failed, closed or gone: the tier state returns to the exporter,
//                                still exported, and the token may be used again.
//
// The daemon never reads the exporter's cache (GPU memory): the adopter copies T0 rows itself.
// Thread-safety: plain values; the channels use them on the data-plane thread.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kvtier/kernels/quantize.hpp"
#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/pool_segment.hpp"
#include "kvtier/tier/policy_kind.hpp"
#include "kvtier/tier/sequence_tiers.hpp"
#include "kvtier/tier/slot_map.hpp"

namespace kvtier::daemon {

// A sequence's part in a hand-off, as a channel sees it.
enum class HandoffState : std::uint8_t {
  kNone = 0,
  kExported,   // frozen in its exporter, waiting for an adopter
  kLent,       // exporter: the tier state is with the adopter, its plan in flight
  kHandedOff,  // exporter: adopted; nothing left but the id until the exporter closes it
  kReceiving,  // adopter: the hand-off plan is queued or in flight
  kAdopted,    // adopter: an ordinary sequence that came from another client
};

// Which exported sequence a hand-off is about, and the Server's name for it.
struct HandoffOrigin {
  std::uint64_t token = 0;
  std::uint32_t exporter = 0;  // client id
  std::uint32_t sequence = 0;  // in the exporter
};

// What an exporter lends an adopter: its tier state (moved) and where its host rows are (read
// only, valid for the duration of ClientChannel::adopt).
struct HandoffLoan {
  HandoffOrigin origin;
  tier::SequenceTiers tiers;
  std::optional<std::uint32_t> last_step;
  std::uint32_t digest_dim = 0;
  const tier::SlotMap* t1 = nullptr;           // position -> exporter pool slot
  const tier::SlotMap* t2 = nullptr;           // position -> exporter int8 slot
  const tier::SlotMap* cache_slots = nullptr;  // position -> exporter cache slot (T0 tokens)
  const shm::PoolView* pool = nullptr;
  const shm::Int8PoolView* int8 = nullptr;     // null when the exporter has no int8 pool
  std::uint32_t int8_group = 0;
};

// What the adopter needs room for (checked before anything is lent).
struct HandoffNeeds {
  std::uint32_t live_tokens = 0;  // moves of the hand-off plan
  std::uint32_t t1_rows = 0;
  std::uint32_t t2_blocks = 0;  // distinct exporter int8 blocks holding the sequence's T2 rows
  std::uint64_t row_bytes = 0;  // one token's row in one layer
  std::uint32_t int8_group = 0;
};

// What the adopter's session replies with.
struct AdoptedSequence {
  std::uint32_t prompt_length = 0;
  std::uint32_t positions = 0;
  std::uint32_t digest_dim = 0;  // the exporter's key digest width (r_kv): the adopter must send the same
  tier::PolicyKind policy = tier::PolicyKind::kPaper;
  tier::TierParams params;       // the exporter's, kept by the sequence (score shipping)
  std::uint64_t steps_done = 0;  // steps counted so far: the adopter's shipping continues from them
};

}  // namespace kvtier::daemon
