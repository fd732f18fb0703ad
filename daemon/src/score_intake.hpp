// ScoreIntake: the daemon's reader of one client's score ring (shm::ScoreConsumer). It drains the
// ring record by record (each handled as soon as it is copied out), validates every record
// against the sequences the channel has open, applies attention (per-step records accumulate,
// per-interval sums add: SequenceTiers' accumulate_step_scores, add_score_sums,
// add_recent_sums), value-range and key-digest records to the sequence's tier::SequenceTiers,
// and reports each step end to the channel, which decides the sequence or owes it a decision.
//
// Rules, per record, in this order (a violation is the client's: the caller ends its session):
//   sequence frozen here (exported, lent, or a failed adoption not yet closed) -> ignored, counted
//   sequence not open                        -> kNotFound
//   kind not a shm::ScoreKind                -> kProtocol
//   step end whose step does not increase    -> kInvalidArgument (naming both steps)
//   step end whose length (first_position) is beyond max_tokens -> kInvalidArgument
//   interval sums outside an interval's last step -> kInvalidArgument (naming the step)
//   values SequenceTiers refuses             -> its error, prefixed with the sequence
// The first error stops the drain; records of a batch are counted once the whole batch applied.
//
// Thread-safety: data-plane thread only (like the ClientChannel that owns it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "kvtier/base/error.hpp"
#include "kvtier/shm/score_ring.hpp"
#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::daemon {

class ScoreIntake {
 public:
  static constexpr std::size_t kBatch = 64;  // records handled per look at the ring's counters

  // Where one sequence's records go, as the channel says (Sequences::find). Within one drain()
  // the intake uses the pointers for the run of consecutive records of that sequence up to and
  // including its next step end, never after calling step_ended.
  struct Target {
    tier::SequenceTiers* tiers = nullptr;               // null: not open here
    std::optional<std::uint32_t>* last_step = nullptr;  // set with tiers: the last step ended
    std::uint32_t digest_dim = 0;                       // key digest width, fixed at open
    bool ignored = false;                               // frozen: records are counted and dropped
  };

  // The channel's side (ClientChannel implements it).
  class Sequences {
   public:
    virtual Target find(std::uint32_t sequence) = 0;
    // A step of `sequence` ended: its last_step is updated and SequenceTiers::end_step() has run.
    // An error stops the drain.
    virtual Status step_ended(std::uint32_t sequence) = 0;

   protected:
    ~Sequences() = default;
  };

  explicit ScoreIntake(shm::ScoreConsumer ring) noexcept : ring_(ring) {}

  // Pops and applies records until the ring is empty or one fails (kProtocol from the ring
  // itself, or a rule above).
  Status drain(Sequences& sequences);

  // The ring's sleep handshake (score_ring.hpp).
  bool announce_sleep() noexcept { return ring_.announce_sleep(); }
  void cancel_sleep() noexcept { ring_.cancel_sleep(); }

  std::uint64_t records() const noexcept { return records_; }  // applied, ignored ones included
  std::uint64_t ignored() const noexcept { return ignored_; }
  std::uint64_t dropped() const noexcept { return ring_.dropped(); }  // client-written, informational

 private:
  Status apply(const shm::ScoreRecord& record, const Target& target, Sequences& sequences);
  static Status end_step(const shm::ScoreRecord& record, const Target& target, Sequences& sequences);

  shm::ScoreConsumer ring_;
  std::uint64_t records_ = 0;
  std::uint64_t ignored_ = 0;
};

}  // namespace kvtier::daemon
