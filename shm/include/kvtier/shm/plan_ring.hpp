// Role views over the plan ring (daemon -> client): PlanProducer for the daemon, PlanConsumer for
// the client. Layout, index diagram and memory orders: ring_layout.hpp.
//
// A plan is one epoch, split over one or more PlanRecords; the last carries kPlanLast. The client
// applies all of an epoch's records, then pushes one PlanAck for it (applied or failed) onto the
// acknowledgement slots in the ring's header (ring_layout.hpp). Several plans (of different
// sequences) may be in flight at once and be acknowledged in any order; which epochs may be
// acknowledged is the daemon's bookkeeping (daemon/src/plan_outbox.hpp). Wake-ups:
//   daemon -> client: the client waits with a bounded spin, then a (non-private, cross-process)
//     futex on the producer line's `wake` word; a push that finds consumer_waiting set bumps
//     `wake` and calls FUTEX_WAKE.
//   client -> daemon: the daemon sleeps on the client's eventfd doorbell (shared with the score
//     ring); ack()/fail() return kPushedWake when the daemon announced sleep (producer_waiting), so the
//     client rings it. One flag per ring, not one per segment, keeps each ring self-contained.
//
// Thread-safety: one thread per view at a time; one producer and one consumer view per ring.
// Views do not own memory. Capacity is copied at construction and never re-read.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/base/error.hpp"
#include "kvtier/shm/records.hpp"
#include "kvtier/shm/ring_layout.hpp"

namespace kvtier::shm {

// PlanConsumer::wait spins (with a CPU pause) before it sleeps on the futex, for an adaptive
// number of iterations: kPlanSpinIterations while spinning pays off, halved (down to
// kPlanMinSpinIterations) after each wait whose spin ended without a record, whether it then
// slept or timed out, and back to the full budget as soon as a spin sees a record.
// Reason: a spin only helps while the daemon runs on another CPU. Under CPU contention a futex
// wake-up tends to place the client on the daemon's CPU and keep it there; then the daemon
// cannot publish until the client sleeps, and every full spin is a lost ~5 us per round trip
// (kvtier-bench plan_roundtrip, loaded phase, measures it). A client that polls with a zero
// timeout between plans also stops paying the full spin on every poll. A wait that starts with
// a reduced budget spins the full one every kPlanSpinProbeInterval-th time, to notice that the
// two sides run apart again.
inline constexpr int kPlanSpinIterations = 512;
inline constexpr int kPlanMinSpinIterations = 4;
inline constexpr int kPlanSpinProbeInterval = 256;

class PlanProducer {
 public:
  // `ring`: the ring's bytes (PlanRingHeader + slots), 64-byte aligned, at least
  // plan_ring_bytes(capacity). Precondition: is_valid_ring_capacity(capacity).
  // Resumes from shared memory (a fresh ring is all zeros). On an adopted ring the last
  // published epoch is taken as the epoch of the newest record — client-writable, so a lying
  // client can only confuse its own session.
  PlanProducer(std::span<std::byte> ring, std::uint32_t capacity) noexcept;

  // Never blocks: returns false when the ring is full (a client that corrupts its read counter
  // looks full forever). Preconditions (asserted): move_count <= kMovesPerRecord; epoch >= 1;
  // an epoch is continued until a record with kPlanLast, and a new epoch is greater than the
  // last one published.
  bool push(const PlanRecord& record) noexcept;

  // Copies up to out.size() acknowledgements out (oldest first), validates the copies, frees
  // their slots. kProtocol when ack_write moved backwards or more than kPlanAckSlots ahead, or
  // an ack names epoch 0, an epoch beyond published_epoch() or an outcome that is no
  // PlanOutcome. Whether the epoch is in flight is the caller's to check.
  Result<std::size_t> pop_acks(std::span<PlanAck> out);

  // Sets producer_waiting, then re-checks ack_write. Returns true when the caller may sleep on
  // the doorbell; false (flag cleared) when an acknowledgement is unread.
  bool announce_sleep() noexcept;
  void cancel_sleep() noexcept;

  // Backpressure notice: adds `tokens` to the running count and records the reason (relaxed; the
  // client reads it whenever it likes, no wake-up).
  void note_backpressure(std::uint64_t tokens, BackpressureReason reason) noexcept;

  // Highest epoch whose kPlanLast record has been pushed.
  std::uint64_t published_epoch() const noexcept { return published_epoch_; }
  std::uint64_t free_slots() noexcept;
  std::uint32_t capacity() const noexcept { return capacity_; }

 private:
  PlanRingHeader* header_;
  PlanRecord* slots_;
  std::uint32_t capacity_;
  std::uint64_t mask_;
  std::uint64_t write_;
  std::uint64_t read_cache_;
  std::uint64_t published_epoch_ = 0;
  std::uint64_t open_epoch_ = 0;  // epoch with records pushed but no kPlanLast yet; 0 = none
  std::uint64_t ack_read_;        // acknowledgements consumed
  std::uint64_t last_ack_write_;  // the client's ack_write as last seen
};

enum class AckResult {
  kPushed,      // published
  kPushedWake,  // published, and the daemon was asleep: ring the doorbell
  kFull,        // no free acknowledgement slot (the daemon has more plans out than kPlanAckSlots)
};

class PlanConsumer {
 public:
  // Same preconditions as PlanProducer. Resumes from shared memory.
  PlanConsumer(std::span<std::byte> ring, std::uint32_t capacity) noexcept;

  // Copies up to out.size() records out, validates them, frees their slots. kProtocol when the
  // write counter moved backwards or beyond capacity, or a record's move_count is too large.
  Result<std::size_t> pop(std::span<PlanRecord> out);

  // Returns true as soon as a record is pending (or the counter is corrupt: pop() reports it),
  // false after `timeout` without one. Bounded (adaptive, see kPlanSpinIterations) spin, then
  // futex sleep.
  bool wait(std::chrono::nanoseconds timeout) noexcept;

  // Publish that `epoch` was applied completely / could not be applied: one PlanAck each, in
  // the order called. Never blocks (kFull: nothing was published).
  AckResult ack(std::uint64_t epoch) noexcept;
  AckResult fail(std::uint64_t epoch) noexcept;

  struct Backpressure {
    std::uint64_t tokens = 0;
    std::uint32_t reason = 0;  // a BackpressureReason as written by the daemon (not validated)
  };
  Backpressure backpressure() const noexcept;
  // True when the daemon announced sleep after resolving every ack and failure published so
  // far (each ack or fail that finds the flag raised clears it).
  bool producer_idle() const noexcept;

  std::uint64_t consumed() const noexcept { return read_; }
  std::uint32_t capacity() const noexcept { return capacity_; }

 private:
  bool pending() const noexcept;
  AckResult push_ack(std::uint64_t epoch, PlanOutcome outcome) noexcept;

  PlanRingHeader* header_;
  const PlanRecord* slots_;
  std::uint32_t capacity_;
  std::uint64_t read_;
  std::uint64_t last_write_;
  std::uint64_t ack_write_;       // acknowledgements published
  std::uint64_t ack_read_cache_;  // the daemon's ack_read as last seen
  int spin_budget_ = kPlanSpinIterations;  // this view's own, never in shared memory
  int waits_since_probe_ = 0;
};

}  // namespace kvtier::shm
