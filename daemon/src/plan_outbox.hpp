// PlanOutbox: the daemon's side of the two-phase commit on one client's plan ring
// (shm::PlanProducer). It numbers epochs, publishes plans as ring records, holds the plans in
// flight and hands each back once the client acknowledged it, applied or failed.
//
// Window: at most window() plans are in flight per client (limits.plans_in_flight, at most
// shm::kPlanAckSlots), and at most one per sequence, so a sequence's plans stay in order while
// different sequences' plans overlap. Each plan is resolved on its own: the client may
// acknowledge plans in any order, and one plan failing rolls back only that plan.
//
//   send      room in the window and on the ring for the whole plan first (nothing is pushed
//             otherwise and the epoch is not used); then ceil(moves / shm::kMovesPerRecord)
//             records of the epoch, kPlanLast on the last; the plan is in flight
//   poll      pops the client's acknowledgements (shm::PlanAck), oldest first, and resolves each
//             plan acknowledged; an ack of an epoch not in flight is kProtocol ("already
//             resolved"), except a plan taken in the meantime (below)
//   take      a plan stops being in flight without resolving (its sequence closed, its hand-off
//             abandoned); counted neither acked nor failed. Its late ack is ignored once; the
//             newest kTakenRemembered taken epochs are remembered for that
// What resolving means (commit or roll back the PlanTransaction, finish a hand-off) is the
// caller's. Thread-safety: data-plane thread only (like the ClientChannel that owns it).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "handoff.hpp"
#include "kvtier/base/error.hpp"
#include "kvtier/shm/plan_ring.hpp"
#include "kvtier/tier/plan_transaction.hpp"
#include "latency_histogram.hpp"

namespace kvtier::daemon {

enum class PlanKind : std::uint8_t {
  kDecision,  // a tier decision of the sequence
  kRelief,    // relief the NodeBudget asked for (T1 -> T2 / T3)
  kHandoff,   // an adopted sequence's rows arriving from its exporter
};

class PlanOutbox {
 public:
  struct Plan {
    std::uint64_t epoch = 0;
    std::uint32_t sequence = 0;
    PlanKind kind = PlanKind::kDecision;
    std::optional<tier::PlanTransaction> transaction;  // decision and relief plans
    HandoffOrigin origin;                              // hand-off plans
  };
  struct Resolved {
    Plan plan;
    bool applied = false;
  };
  static constexpr std::size_t kTakenRemembered = shm::kPlanAckSlots;

  // Precondition (checked): 1 <= window <= shm::kPlanAckSlots.
  PlanOutbox(shm::PlanProducer ring, std::uint32_t window);

  // Publishes transaction.planned() as the next epoch for `sequence` (kind kDecision or kRelief).
  // True: the plan is in flight and owns the transaction (moved from). False: the ring has no
  // room; nothing was pushed, the epoch is not used and the transaction is untouched.
  // Precondition (checked): can_send(sequence), the transaction plans at least one move.
  bool send(std::uint32_t sequence, PlanKind kind, tier::PlanTransaction&& transaction);
  // The same for a hand-off plan, which has no transaction.
  bool send_handoff(std::uint32_t sequence, const HandoffOrigin& origin, std::span<const shm::PlanMove> moves);

  // Reads the client's acknowledgements (kProtocol per PlanProducer::pop_acks, or for an epoch
  // already resolved) and returns the plans they resolved, in acknowledgement order.
  Result<std::vector<Resolved>> poll();
  // The plan in flight for `sequence`, no longer in flight; nullopt when it has none.
  std::optional<Plan> take(std::uint32_t sequence);

  // The plan in flight for `sequence`, or nullptr.
  const Plan* in_flight(std::uint32_t sequence) const noexcept;
  std::span<const Plan> in_flight() const noexcept { return plans_; }
  bool full() const noexcept { return plans_.size() >= window_; }
  // Room in the window, and no plan of `sequence` in flight.
  bool can_send(std::uint32_t sequence) const noexcept { return !full() && in_flight(sequence) == nullptr; }
  std::uint32_t window() const noexcept { return window_; }
  std::uint64_t next_epoch() const noexcept { return next_epoch_; }

  // The ring's sleep handshake, backpressure notice and size (plan_ring.hpp).
  bool announce_sleep() noexcept { return ring_.announce_sleep(); }
  void cancel_sleep() noexcept { ring_.cancel_sleep(); }
  void note_backpressure(std::uint64_t tokens, shm::BackpressureReason reason) noexcept {
    ring_.note_backpressure(tokens, reason);
  }
  std::uint32_t capacity() const noexcept { return ring_.capacity(); }

  std::uint64_t plans_sent() const noexcept { return plans_sent_; }
  std::uint64_t plans_acked() const noexcept { return plans_acked_; }
  std::uint64_t plans_failed() const noexcept { return plans_failed_; }
  std::uint64_t moves_sent() const noexcept { return moves_sent_; }
  // From publishing a plan to reading its resolution (acknowledged or failed; taken plans are
  // not observed): the client's poll, execution and ack plus the daemon's wake-up.
  const LatencyHistogram& roundtrip() const noexcept { return roundtrip_; }

 private:
  // Pushes `moves` as epoch next_epoch_ if they fit; counts and puts `plan` in flight.
  bool publish(std::span<const shm::PlanMove> moves, Plan plan);

  shm::PlanProducer ring_;
  std::uint32_t window_;
  std::vector<Plan> plans_;  // in flight, in epoch order; at most window_
  std::vector<std::chrono::steady_clock::time_point> sent_at_;  // of plans_[i]
  std::deque<std::uint64_t> taken_;  // epochs taken and not acknowledged since, oldest first
  std::vector<shm::PlanMove> scratch_;
  std::uint64_t next_epoch_ = 1;
  std::uint64_t plans_sent_ = 0, plans_acked_ = 0, plans_failed_ = 0, moves_sent_ = 0;
  LatencyHistogram roundtrip_;
};

}  // namespace kvtier::daemon
