// ClientChannel: the data plane's view of one engine client: its control segment (score and
// plan rings), doorbell, pool slots and open sequences, each with its tier engine state.
//
// The loop, per sequence: score records accumulate into SequenceTiers; a step-end marker (a
// record with count 0) ends a decode step; every Δ steps the engine decides, a PlanTransaction
// reserves destination slots, the differential plan goes out on the plan ring, and when the
// client acknowledges the epoch the placement is committed and source slots are freed (a failed
// epoch rolls back that plan only). Up to limits.plans_in_flight plans of one client are in
// flight at once, at most one per sequence (plan_outbox.hpp); a sequence that becomes due while
// the window is full or its own plan is in flight is owed and decided on a later turn.
//
// T2: moves into T2 get fresh int8 blocks, which the daemon quantizes from the tokens' T1 rows
// before the plan goes out (int8_demotion.hpp). New T1 rows are admitted by the NodeBudget;
// rows it refuses stay in T0 (backpressure: counted, and noted on the plan ring for the client).
// Relief: when the budget asks this client to give rows back (node_budget.hpp), the listed T1
// tokens become a plan of their own (T1 -> T2 or T1 -> T3 per pools.pressure), sent on the
// client's next free turn, before any owed decision.
//
// Hand-off (handoff.hpp): an exported sequence is frozen (its scores are ignored, no decisions);
// once lent, its tier state lives in the adopter's channel until the hand-off plan resolves. The
// adopter's hand-off plan takes the client's next free turn, before relief and decisions, and a
// receiving sequence is not decided until it resolves.
//
// Parts: ScoreIntake (score_intake.hpp) reads the score ring into the sequences' tiers and
// reports step ends here; PlanOutbox (plan_outbox.hpp) numbers, publishes and resolves the
// plans in flight; ReliefQueue (relief_queue.hpp) holds the relief the budget asked for. This
// class orchestrates: sequences, pools, budget membership, when a decision, relief
// (client_channel_relief.cpp) or hand-off (client_channel_handoff.cpp) plan goes out, and what
// resolving it does.
//
// Everything read from the rings is copied out and validated before use; a violation returns
// an error and the DataPlane ends the session. Thread-safety: data-plane thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <spdlog/logger.h>

#include "channel_types.hpp"
#include "event_log.hpp"
#include "handoff.hpp"
#include "kvtier/config/config.hpp"
#include "kvtier/kernels/quantize.hpp"
#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/pool_segment.hpp"
#include "kvtier/tier/block_slot_allocator.hpp"
#include "kvtier/shm/control_segment.hpp"
#include "kvtier/shm/segment.hpp"
#include "kvtier/tier/plan_transaction.hpp"
#include "kvtier/tier/sequence_tiers.hpp"
#include "kvtier/tier/slot_allocator.hpp"
#include "kvtier/tier/slot_map.hpp"
#include "node_budget.hpp"
#include "plan_outbox.hpp"
#include "reattach_checks.hpp"
#include "relief_queue.hpp"
#include "score_intake.hpp"

namespace kvtier::daemon {

class ClientChannel final : public BudgetMember, private ScoreIntake::Sequences {
 public:
  using FailFn = std::function<void(const Error&)>;
  // A hand-off this channel received resolved; on failure the tier state goes back (`returned`).
  using HandoffFn = std::function<void(const HandoffOrigin&, std::optional<tier::SequenceTiers> returned)>;
  // A decision worth an event (event_log.hpp): relief applied, admission refused, plan failed.
  using EventFn = std::function<void(Event)>;

  ClientChannel(asio::io_context& io, std::uint32_t client_id, shm::Segment control, const shm::ControlLayout& layout,
                UniqueFd doorbell, const config::DaemonConfig& config, NodeBudget& budget, spdlog::logger& log,
                FailFn on_fail, HandoffFn on_handoff, EventFn on_event = {});
  ~ClientChannel();

  void set_pool(PoolSetup pools);
  void open_sequence(std::uint32_t sequence_id, std::uint32_t prompt_length, const tier::TierParams& params,
                     std::uint32_t digest_dim);
  void close_sequence(std::uint32_t sequence_id);
  ClientSnapshot snapshot() const;
  // The committed placement of `sequence_id` from `first_position` on, at most `max_runs` runs
  // (client_channel_placement.cpp). A pending plan's moves show only once acknowledged.
  // kNotFound for a sequence this client does not have, kBadState for one whose tier state is
  // lent out or handed off, kInvalidArgument for first_position beyond its length.
  // Precondition: max_runs > 0 (the session checks it).
  Result<PlacementPage> placement(std::uint32_t sequence_id, std::uint32_t first_position,
                                  std::uint32_t max_runs) const;

  // --- reattachment and orderly stop (PROTOCOL.md §4 "Reattachment") ---
  // After set_pool with pools adopted from a predecessor: the client's sequences as it records
  // them, their rows claimed in the allocators. kBadState for a slot that cannot be claimed (the
  // checks of restore_sequences make that a daemon bug); nothing is left half-claimed then.
  Status restore(std::vector<RestoredSequence> sequences);
  // No plan goes out from now on (scores and acks are still read).
  void drain() noexcept { draining_ = true; }
  std::size_t plans_in_flight() const { return outbox_.in_flight().size(); }
  // The pool segments keep their names when the channel goes (for a successor to adopt).
  void keep_pool_names();

  // Drains what the client published (scores, acks) and publishes due plans. Called on a
  // doorbell and before a close.
  void service();

  // --- hand-off (client_channel_handoff.cpp) ---
  // Freezes an open sequence for export; `t0` lists (position, cache slot) ascending and must be
  // exactly the sequence's T0 tokens. kBadState while one of its plans is in flight.
  Status freeze(std::uint32_t sequence_id, std::span<const std::pair<std::uint32_t, std::uint32_t>> t0);
  // What adopting the exported sequence takes; kNotFound when it is not (or no longer) exported.
  Result<HandoffNeeds> needs(std::uint32_t sequence_id) const;
  // kLimitExceeded / kBadState naming what is missing when this client cannot take it.
  Status can_adopt(const HandoffNeeds& needs) const;
  // Lends the exported sequence (precondition: needs() succeeded). Its host rows stay allocated
  // and readable through the loan until finish_loan.
  HandoffLoan lend(std::uint32_t sequence_id, const HandoffOrigin& origin);
  // Copies the loan's host rows into this client's pools and queues the hand-off plan for
  // `sequence_id` (precondition: can_adopt succeeded). Returns what the adopter is told.
  AdoptedSequence adopt(std::uint32_t sequence_id, HandoffLoan loan);
  // The adopter resolved a loan of `sequence_id`: applied, its rows are freed; otherwise the
  // tier state comes back and the sequence is exported again.
  void finish_loan(std::uint32_t sequence_id, std::optional<tier::SequenceTiers> returned);
  // Before the channel goes away: every hand-off it received and did not resolve fails.
  void abandon_handoffs();

  // --- BudgetMember (node_budget.hpp): the channel joins the budget on construction ---
  std::uint32_t client_id() const noexcept override { return client_id_; }
  bool has_pool() const noexcept override { return allocator_.has_value(); }
  std::uint32_t weight() const noexcept override { return weight_; }
  std::uint64_t bytes_per_slot() const noexcept override { return bytes_per_slot_; }
  std::uint64_t ddr_bytes_used() const noexcept override;
  bool relief_pending() const noexcept override;
  void lowest_t1(std::size_t k, std::vector<ReliefCandidate>& out) const override;
  void request_relief(std::vector<ReliefCandidate> tokens) override;

 private:
  struct Sequence {
    tier::SequenceTiers tiers;
    tier::SlotMap slots;     // T1
    tier::SlotMap t2_slots;  // T2
    std::optional<std::uint32_t> last_step;
    std::uint32_t digest_dim = 0;  // key digest width (r_kv), fixed at open
    HandoffState handoff = HandoffState::kNone;
    tier::SlotMap cache_slots;  // exported: each T0 token's slot in the exporter's cache
  };
  // An exported sequence whose tier state is lent out (kLent) or gone for good (kHandedOff):
  // the host rows it held until the adopter acknowledged, and what it needs back on failure.
  struct Lent {
    HandoffState state = HandoffState::kLent;
    tier::SlotMap slots, t2_slots, cache_slots;
    std::optional<std::uint32_t> last_step;
    std::uint32_t digest_dim = 0;
    std::uint32_t prompt_length = 0;
  };
  // A hand-off plan waiting for the client's next free turn.
  struct Incoming {
    std::uint32_t sequence = 0;
    HandoffOrigin origin;
    std::vector<shm::PlanMove> moves;
  };

  void arm_doorbell();
  // ScoreIntake::Sequences: where a sequence's records go; a step end decides or owes.
  ScoreIntake::Target find(std::uint32_t sequence_id) override;
  Status step_ended(std::uint32_t sequence_id) override;
  Status resolve_acks();
  Status resolve(PlanOutbox::Resolved resolved);
  Status decide_owed();
  // Decides for one sequence and publishes the plan; false when nothing was sent (no moves).
  Result<bool> decide_and_publish(std::uint32_t sequence_id, Sequence& sequence);
  // Publishes the pending decision of `sequence` (decide() or propose()) as a plan: slots,
  // admission, quantization, the ring. False when nothing was sent.
  Result<bool> send_pending(std::uint32_t sequence_id, Sequence& sequence, std::span<const tier::TierMove> moves,
                            bool relief);
  // Turns queued relief into one plan; false when there was nothing to send.
  Result<bool> send_relief();
  // Counts an applied plan's moves (and notes a relief plan's as pressure events).
  void count_committed(std::uint32_t sequence_id, std::uint64_t epoch, const tier::PlanTransaction& transaction,
                       bool relief);
  // Relief means per pools.pressure: whether `sequence` may demote to T2 now, how many tokens it
  // may evict now.
  bool can_demote(const Sequence& sequence) const;
  std::uint32_t eviction_room(const Sequence& sequence) const;
  // Publishes the oldest queued hand-off plan; false when the ring had no room. Precondition:
  // room in the window.
  bool send_handoff();
  // Resolves a hand-off plan in flight (applied or not) or one still queued.
  void resolve_handoff(std::uint32_t sequence_id, const HandoffOrigin& origin, bool applied);
  // The hand-off of a receiving sequence failed (closed, or this client is going away).
  void abandon_handoff(std::uint32_t sequence_id);
  void release_slots(const tier::SlotMap& t1, const tier::SlotMap& t2);
  void fail(const Error& error);
  // Hands one event to the control plane (stamped now; the Server adds the client's name).
  void note(EventKind kind, std::uint32_t sequence_id, std::uint64_t tokens, std::string detail);

  std::uint32_t client_id_;
  const config::DaemonConfig& config_;
  spdlog::logger& log_;
  FailFn on_fail_;
  HandoffFn on_handoff_;
  EventFn on_event_;
  shm::Segment control_;
  ScoreIntake intake_;  // views into control_
  asio::posix::stream_descriptor doorbell_;
  NodeBudget& budget_;
  std::optional<shm::Segment> pool_;
  std::optional<shm::PoolView> pool_view_;
  std::optional<tier::SlotAllocator> allocator_;
  std::optional<Int8Pool> int8_;
  std::optional<shm::Int8PoolView> int8_view_;
  std::optional<tier::BlockSlotAllocator> int8_allocator_;
  kernels::Int8Geometry int8_geometry_;
  std::uint32_t weight_ = 1;
  std::uint64_t bytes_per_slot_ = 0;
  ReliefQueue relief_;  // queued by the NodeBudget
  std::map<std::uint32_t, Sequence> sequences_;
  std::map<std::uint32_t, Lent> lent_;  // exported sequences whose tier state is elsewhere
  std::deque<Incoming> incoming_;
  std::set<std::uint32_t> dropped_;  // adopted sequences whose hand-off failed, until closed
  // After the allocators: the transactions of plans in flight roll back into them when the
  // channel goes away, so it must be destroyed first.
  PlanOutbox outbox_;  // views into control_
  std::deque<std::uint32_t> owed_;  // sequences due while the window was full or their plan in flight
  std::uint64_t errors_ = 0;
  std::uint64_t t2_demotions_ = 0, pressure_demotions_ = 0, pressure_evictions_ = 0, int8_trimmed_ = 0;
  shm::BackpressureReason last_backpressure_ = shm::BackpressureReason::kNone;
  PlanTraffic traffic_;  // backpressure by reason; its plan_roundtrip is the outbox's, copied at snapshot
  std::uint64_t int8_bytes_per_token_ = 0;
  bool failed_ = false;
  bool draining_ = false;
  bool doorbell_armed_ = false;                                      // a doorbell wait is pending
  std::shared_ptr<const bool> alive_ = std::make_shared<const bool>(true);  // expires with the channel
};

}  // namespace kvtier::daemon
