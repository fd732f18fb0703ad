// Fixed-size records carried by the per-client rings in the control segment (see LAYOUT.md).
//
// ScoreRecord travels client -> daemon (score ring); PlanRecord daemon -> client (plan ring);
// PlanAck client -> daemon (the plan ring's acknowledgement slots).
// Both are plain trivially copyable values: a ring slot is copied out of shared memory into one
// of these before anything looks at it. Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace kvtier::shm {

inline constexpr std::uint32_t kScoresPerRecord = 60;

// What a ScoreRecord carries (ScoreRecord::kind). The daemon refuses any other value.
enum class ScoreKind : std::uint16_t {
  kAttention = 0,   // this step's attention received by positions [first, first + count)
  kStepEnd = 1,     // decode step `step` ended (count = 0; first_position = the client's length)
  kValueRange = 2,  // per-position value-vector range (vase policy)
  kKeyDigest = 3,   // count / dim positions' key digests of the sequence's digest dim (r_kv)
  // Per-decision shipping (layout 5; kernels/interval_scores.hpp defines the sums): sent in the
  // step that completes an interval, before its step end, once per interval and position.
  kAttentionSum = 4,  // the interval's attention sums Σ_j d^(t−j)·x_j by position
  kRecentSum = 5,     // the interval's recent-attention sums Σ_j ρ^(t−j)·x_j (vase, r_kv)
};
inline constexpr std::uint16_t kScoreKindCount = 6;

// One record of per-token features of one sequence, for absolute positions starting at
// first_position. count <= kScoresPerRecord (the daemon checks). `step` is the client's step
// number for kAttention and kStepEnd, 0 otherwise.
struct ScoreRecord {
  std::uint32_t sequence;
  std::uint32_t first_position;
  std::uint16_t count;  // values used
  std::uint16_t kind;   // ScoreKind
  std::uint32_t step;
  float values[kScoresPerRecord];
};

// Tier numbers as they appear in PlanMove::from_tier / to_tier (DESIGN.md §1), and the no-slot
// sentinel: the one definition. tier::Tier and tier::kNoSlot alias these; the C ABI's
// KVTIER_T0..KVTIER_TPEER and KVTIER_NO_SLOT (kvtier.h, plain C) are static_asserted equal in
// client/src/sequence_cache.cpp; tests/layout pins the numbers.
// Values travel in shared memory: never renumber.
inline constexpr std::uint8_t kTierHbm = 0;      // T0: the engine's own KV cache
inline constexpr std::uint8_t kTierDdr = 1;      // T1: daemon DDR pool, native precision
inline constexpr std::uint8_t kTierInt8 = 2;     // T2: daemon int8 pool
inline constexpr std::uint8_t kTierDropped = 3;  // T3: nowhere
inline constexpr std::uint8_t kTierPeer = 4;     // hand-off plans only: the exporter's cache; src_slot is its slot there
inline constexpr std::uint32_t kNoSlot = 0xFFFFFFFFu;  // src/dst slot when the tier has no slot

// Move the token at `position` from one tier to another. Slots index the pool of that tier;
// kNoSlot where the tier has none (T0, T3).
struct PlanMove {
  std::uint32_t position;
  std::uint8_t from_tier;
  std::uint8_t to_tier;
  std::uint16_t reserved;  // 0
  std::uint32_t src_slot;
  std::uint32_t dst_slot;
};

// Why the daemon last kept tokens in T0 instead of moving them to host memory (the plan ring's
// backpressure notice, ring_layout.hpp). Values travel in shared memory: never renumber.
enum class BackpressureReason : std::uint32_t {
  kNone = 0,
  kPoolFull = 1,    // this client's DDR pool segment has no free row
  kNodeBudget = 2,  // the node-wide DDR budget is spent (other tenants hold it, or this one's share)
};

inline constexpr std::uint16_t kPlanLast = 1;  // PlanRecord::flags: last record of its epoch
inline constexpr std::size_t kPlanRecordBytes = 1024;
inline constexpr std::size_t kPlanRecordHeaderBytes = 16;
inline constexpr std::uint16_t kMovesPerRecord =
    static_cast<std::uint16_t>((kPlanRecordBytes - kPlanRecordHeaderBytes) / sizeof(PlanMove));

// A slice of the plan for one epoch. A plan may span several records with the same epoch; the
// last one carries kPlanLast. The client acknowledges the epoch once it applied all of them.
struct PlanRecord {
  std::uint64_t epoch;  // >= 1, non-decreasing along the ring; one plan (one sequence) per epoch
  std::uint32_t sequence;
  std::uint16_t move_count;  // <= kMovesPerRecord (the client checks)
  std::uint16_t flags;       // kPlanLast
  PlanMove moves[kMovesPerRecord];
};

// How the client resolved a plan (PlanAck::outcome). The daemon refuses any other value.
// Values travel in shared memory: never renumber.
enum class PlanOutcome : std::uint32_t {
  kApplied = 1,  // every move executed: the daemon commits the plan
  kFailed = 2,   // not applied: the daemon rolls back that plan's moves only
};

// The client's resolution of one plan (one epoch), in the order the client resolved them,
// which may differ from the order the plans were published (plans of different sequences).
struct PlanAck {
  std::uint64_t epoch;
  std::uint32_t outcome;   // PlanOutcome
  std::uint32_t reserved;  // 0
};

static_assert(sizeof(ScoreRecord) == 256 && alignof(ScoreRecord) == 4);
static_assert(sizeof(PlanMove) == 16 && alignof(PlanMove) == 4);
static_assert(kMovesPerRecord == 63);
static_assert(sizeof(PlanRecord) == kPlanRecordBytes && alignof(PlanRecord) == 8);
static_assert(std::is_standard_layout_v<ScoreRecord> && std::is_trivially_copyable_v<ScoreRecord>);
static_assert(std::is_standard_layout_v<PlanMove> && std::is_trivially_copyable_v<PlanMove>);
static_assert(std::is_standard_layout_v<PlanRecord> && std::is_trivially_copyable_v<PlanRecord>);
static_assert(sizeof(PlanAck) == 16 && alignof(PlanAck) == 8);
static_assert(std::is_standard_layout_v<PlanAck> && std::is_trivially_copyable_v<PlanAck>);

}  // namespace kvtier::shm
