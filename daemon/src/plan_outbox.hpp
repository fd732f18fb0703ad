// PlanOutbox: the daemon's side of the two-phase commit on one client's plan ring
// (shm::PlanProducer). It numbers epochs, publishes a plan as ring records, holds the one plan
// outstanding per client and hands it back once the client acknowledged or failed its epoch.
//
//   send      room for the whole plan first (nothing is pushed otherwise and the epoch is not
//             used); then ceil(moves / shm::kMovesPerRecord) records of the epoch, kPlanLast on
//             the last; the plan is outstanding
//   poll      reads (and so validates) acked_epoch and failed_epoch on every call; an ack of the
//             outstanding epoch resolves it applied, else a failure resolves it not applied
//   take      the plan stops being outstanding without resolving (its sequence closed, its
//             hand-off abandoned); counted neither acked nor failed
// What resolving means (commit or roll back the PlanTransaction, finish a hand-off) is the
// caller's. Thread-safety: data-plane thread only (like the ClientChannel that owns it).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "handoff.hpp"
#include "kvtier/protocol/error.hpp"
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

  explicit PlanOutbox(shm::PlanProducer ring) noexcept : ring_(ring) {}

  // Publishes transaction.planned() as the next epoch for `sequence` (kind kDecision or kRelief).
  // True: the plan is outstanding and owns the transaction (moved from). False: the ring has no
  // room; nothing was pushed, the epoch is not used and the transaction is untouched.
  // Precondition (checked): no plan outstanding, the transaction plans at least one move.
  bool send(std::uint32_t sequence, PlanKind kind, tier::PlanTransaction&& transaction);
  // The same for a hand-off plan, which has no transaction.
  bool send_handoff(std::uint32_t sequence, const HandoffOrigin& origin, std::span<const shm::PlanMove> moves);

  // Validates both client-written counters (kProtocol per PlanProducer), then returns the
  // outstanding plan if the client resolved it; nullopt while none is outstanding or it is not.
  Result<std::optional<Resolved>> poll();
  std::optional<Plan> take() noexcept;

  Plan* outstanding() noexcept { return outstanding_ ? &*outstanding_ : nullptr; }
  const Plan* outstanding() const noexcept { return outstanding_ ? &*outstanding_ : nullptr; }
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
  // Pushes `moves` as epoch next_epoch_ if they fit; counts and makes `plan` outstanding.
  bool publish(std::span<const shm::PlanMove> moves, Plan plan);

  shm::PlanProducer ring_;
  std::optional<Plan> outstanding_;
  std::vector<shm::PlanMove> scratch_;
  std::uint64_t next_epoch_ = 1;
  std::uint64_t plans_sent_ = 0, plans_acked_ = 0, plans_failed_ = 0, moves_sent_ = 0;
  std::chrono::steady_clock::time_point sent_at_;  // of the outstanding plan
  LatencyHistogram roundtrip_;
};

}  // namespace kvtier::daemon
