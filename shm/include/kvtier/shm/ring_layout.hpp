// Byte layout of the two SPSC rings in a control segment: counter lines followed by inline slots.
//
// These structs are only ever touched through the role views in score_ring.hpp / plan_ring.hpp;
// this header exists so that the layout (and the fingerprint in layout.hpp) has one definition.
// Thread-safety: the atomics are shared between exactly one producer and one consumer process.
//
// Ring of capacity C (a power of two), counters are monotonically increasing u64s, never wrap
// in practice (2^64 records), slot index = counter & (C - 1):
//
//     +-------------------------+  offset 0
//     | producer line (64 B)    |  written only by the producer: write (+ extras)
//     +-------------------------+  offset 64
//     | consumer line (64 B)    |  written only by the consumer: read (+ extras)
//     +-------------------------+  offset 128
//     | slot[0] ... slot[C-1]   |  records, inline
//     +-------------------------+
//
//       read                 write
//        v                     v
//   ...[ r | r+1 | ... | w-1 ]...      occupied = write - read, 0 <= occupied <= C
//
// Invariants: read <= write <= read + C. The producer owns slots [write, read + C), the consumer
// owns [read, write). Memory orders (folly ProducerConsumerQueue recipe):
//   producer: copy record into slot[write & mask]; write.store(write + 1, release)
//   consumer: write.load(acquire); copy slot out;  read.store(read + 1, release)
//   producer checks room with read.load(acquire) (so the consumer's copy-out happened before).
// Each side keeps its own counter in private memory and only publishes it; it never re-reads
// its own counter from shared memory (the peer could have scribbled on it).
//
// Sleep / wake (Dekker pattern, so no wake-up is lost). All four accesses are seq_cst, so they
// sit in one total order (seq_cst store/load rather than fences: same cost on x86, and
// ThreadSanitizer understands them):
//   sleeper: waiting.store(1, seq_cst); re-check the peer's counter (seq_cst); then sleep
//   waker:   publish its counter (seq_cst store); if (waiting.load(seq_cst)) wake
// Either the waker sees waiting == 1, or the sleeper's re-check sees the new counter.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kvtier/shm/records.hpp"

namespace kvtier::shm {

inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::uint32_t kMaxRingCapacity = 1u << 20;

// --- Score ring: client produces, daemon consumes. -------------------------------------------

struct alignas(kCacheLine) ScoreRingProducerLine {  // written by the client
  std::atomic<std::uint64_t> write;    // records published
  std::atomic<std::uint64_t> dropped;  // records dropped because the ring was full (statistics)
};

struct alignas(kCacheLine) ScoreRingConsumerLine {  // written by the daemon
  std::atomic<std::uint64_t> read;  // records consumed
  // 1 while the daemon is (about to be) asleep on this client's eventfd doorbell. Set by the
  // daemon; the client clears it (1 -> 0) when it decides to ring, so it rings once per sleep.
  std::atomic<std::uint32_t> consumer_waiting;
  std::uint32_t reserved;
};

struct ScoreRingHeader {
  ScoreRingProducerLine producer;
  ScoreRingConsumerLine consumer;
};

// --- Plan ring: daemon produces, client consumes and acknowledges. ---------------------------
//
// The client's acknowledgements travel back on a second SPSC ring inside the plan ring's header
// (client produces at ack_write, daemon consumes at ack_read), kPlanAckSlots PlanAcks inline:
//
//     +-------------------------+  0     producer line: write, wake, ..., ack_read  (daemon)
//     +-------------------------+  64    consumer line: read, ack_write, ...        (client)
//     +-------------------------+  128   acks[ack & (kPlanAckSlots - 1)]            (client)
//     +-------------------------+  128 + 16 kPlanAckSlots: plan slots
//
// Same counter rules and memory orders as the rings above (ack_read <= ack_write <= ack_read +
// kPlanAckSlots). The daemon keeps at most kPlanAckSlots plans in flight per client (its window,
// limits.plans_in_flight, is at most that), and each plan gets exactly one ack, so an honest
// client always finds room.
inline constexpr std::uint32_t kPlanAckSlots = 64;

struct alignas(kCacheLine) PlanRingProducerLine {  // written by the daemon
  std::atomic<std::uint64_t> write;  // records published
  // Futex word: the daemon increments it after a push that found the client waiting.
  std::atomic<std::uint32_t> wake;
  // 1 while the daemon is (about to be) asleep waiting for acks; the client clears it (1 -> 0)
  // when an ack decides to ring the doorbell.
  std::atomic<std::uint32_t> producer_waiting;
  // Backpressure notice (daemon -> client, relaxed, informational): a running count of tokens
  // the daemon kept in T0 because no host row was available, and why the latest were
  // (a BackpressureReason). Written before the plan that carries the decision's other moves.
  std::atomic<std::uint32_t> backpressure_reason;
  std::atomic<std::uint64_t> backpressure_tokens;
  std::atomic<std::uint64_t> ack_read;  // acknowledgements consumed
};

struct alignas(kCacheLine) PlanRingConsumerLine {  // written by the client
  std::atomic<std::uint64_t> read;       // records consumed
  std::atomic<std::uint64_t> ack_write;  // acknowledgements published
  std::atomic<std::uint32_t> consumer_waiting;  // 1 while the client sleeps on `wake`
  std::uint32_t reserved;
};

struct PlanRingHeader {
  PlanRingProducerLine producer;
  PlanRingConsumerLine consumer;
  PlanAck acks[kPlanAckSlots];  // written by the client
};

constexpr bool is_valid_ring_capacity(std::uint64_t capacity) noexcept {
  return capacity != 0 && capacity <= kMaxRingCapacity && (capacity & (capacity - 1)) == 0;
}

// Bytes of a whole ring (header + slots). Precondition: is_valid_ring_capacity(capacity).
constexpr std::uint64_t score_ring_bytes(std::uint32_t capacity) noexcept {
  return sizeof(ScoreRingHeader) + std::uint64_t{capacity} * sizeof(ScoreRecord);
}
constexpr std::uint64_t plan_ring_bytes(std::uint32_t capacity) noexcept {
  return sizeof(PlanRingHeader) + std::uint64_t{capacity} * sizeof(PlanRecord);
}

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint32_t>) == 4, "futex needs a plain 32-bit word");
static_assert(sizeof(ScoreRingHeader) == 2 * kCacheLine && alignof(ScoreRingHeader) == kCacheLine);
static_assert(sizeof(PlanRingHeader) == 2 * kCacheLine + kPlanAckSlots * sizeof(PlanAck) &&
              alignof(PlanRingHeader) == kCacheLine);
static_assert(is_valid_ring_capacity(kPlanAckSlots) && sizeof(PlanRingHeader) % kCacheLine == 0);
static_assert(std::is_standard_layout_v<ScoreRingHeader> && std::is_standard_layout_v<PlanRingHeader>);
static_assert(sizeof(ScoreRecord) % kCacheLine == 0 && sizeof(PlanRecord) % kCacheLine == 0,
              "slots stay cache-line aligned");

}  // namespace kvtier::shm
