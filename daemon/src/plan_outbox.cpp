#include "plan_outbox.hpp"

#include <algorithm>
#include <utility>

#include "kvtier/protocol/check.hpp"

namespace kvtier::daemon {

bool PlanOutbox::send(std::uint32_t sequence, PlanKind kind, tier::PlanTransaction&& transaction) {
  KVTIER_CHECK(kind != PlanKind::kHandoff, "a hand-off plan goes through send_handoff");
  scratch_.clear();
  for (const tier::PlannedMove& m : transaction.planned()) {
    scratch_.push_back(shm::PlanMove{m.position, static_cast<std::uint8_t>(m.from), static_cast<std::uint8_t>(m.to),
                                     0, m.source_slot, m.destination_slot});
  }
  if (!publish(scratch_, Plan{0, sequence, kind, std::nullopt, {}})) return false;
  outstanding_->transaction.emplace(std::move(transaction));
  return true;
}

bool PlanOutbox::send_handoff(std::uint32_t sequence, const HandoffOrigin& origin,
                              std::span<const shm::PlanMove> moves) {
  return publish(moves, Plan{0, sequence, PlanKind::kHandoff, std::nullopt, origin});
}

bool PlanOutbox::publish(std::span<const shm::PlanMove> moves, Plan plan) {
  KVTIER_CHECK(!outstanding_, "one plan outstanding per client");
  KVTIER_CHECK(!moves.empty(), "a plan moves at least one token");
  const std::size_t records = (moves.size() + shm::kMovesPerRecord - 1) / shm::kMovesPerRecord;
  if (ring_.free_slots() < records) return false;  // the client is behind: the caller retries later
  shm::PlanRecord record{};
  record.epoch = next_epoch_;
  record.sequence = plan.sequence;
  for (std::size_t first = 0; first < moves.size(); first += shm::kMovesPerRecord) {
    const std::size_t n = std::min<std::size_t>(shm::kMovesPerRecord, moves.size() - first);
    std::copy_n(moves.begin() + static_cast<std::ptrdiff_t>(first), n, record.moves);
    record.move_count = static_cast<std::uint16_t>(n);
    record.flags = first + n == moves.size() ? shm::kPlanLast : 0;
    [[maybe_unused]] const bool pushed = ring_.push(record);  // room was checked above
  }
  plan.epoch = next_epoch_++;
  ++plans_sent_;
  moves_sent_ += moves.size();
  sent_at_ = std::chrono::steady_clock::now();
  outstanding_.emplace(std::move(plan));
  return true;
}

Result<std::optional<PlanOutbox::Resolved>> PlanOutbox::poll() {
  // Read (and so validate) both counters on every pass, plan outstanding or not.
  auto acked = ring_.acked_epoch();
  if (!acked) return tl::unexpected(acked.error());
  auto failed = ring_.failed_epoch();
  if (!failed) return tl::unexpected(failed.error());
  if (!outstanding_) return std::nullopt;
  const bool applied = *acked >= outstanding_->epoch;
  if (!applied && *failed < outstanding_->epoch) return std::nullopt;
  ++(applied ? plans_acked_ : plans_failed_);
  roundtrip_.observe(std::chrono::steady_clock::now() - sent_at_);
  return Resolved{*take(), applied};
}

std::optional<PlanOutbox::Plan> PlanOutbox::take() noexcept {
  std::optional<Plan> plan = std::move(outstanding_);
  outstanding_.reset();
  return plan;
}

}  // namespace kvtier::daemon
