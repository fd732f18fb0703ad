#include "plan_outbox.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "kvtier/base/check.hpp"

namespace kvtier::daemon {

PlanOutbox::PlanOutbox(shm::PlanProducer ring, std::uint32_t window) : ring_(ring), window_(window) {
  KVTIER_CHECK(window >= 1 && window <= shm::kPlanAckSlots, "plan window outside 1..kPlanAckSlots");
  plans_.reserve(window);
  sent_at_.reserve(window);
}

bool PlanOutbox::send(std::uint32_t sequence, PlanKind kind, tier::PlanTransaction&& transaction) {
  KVTIER_CHECK(kind != PlanKind::kHandoff, "a hand-off plan goes through send_handoff");
  scratch_.clear();
  for (const tier::PlannedMove& m : transaction.planned()) {
    scratch_.push_back(shm::PlanMove{m.position, static_cast<std::uint8_t>(m.from), static_cast<std::uint8_t>(m.to),
                                     0, m.source_slot, m.destination_slot});
  }
  if (!publish(scratch_, Plan{0, sequence, kind, std::nullopt, {}})) return false;
  plans_.back().transaction.emplace(std::move(transaction));
  return true;
}

bool PlanOutbox::send_handoff(std::uint32_t sequence, const HandoffOrigin& origin,
                              std::span<const shm::PlanMove> moves) {
  return publish(moves, Plan{0, sequence, PlanKind::kHandoff, std::nullopt, origin});
}

bool PlanOutbox::publish(std::span<const shm::PlanMove> moves, Plan plan) {
  KVTIER_CHECK(can_send(plan.sequence), "plan window full or the sequence's plan in flight");
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
  plans_.push_back(std::move(plan));
  sent_at_.push_back(std::chrono::steady_clock::now());
  return true;
}

Result<std::vector<PlanOutbox::Resolved>> PlanOutbox::poll() {
  std::vector<Resolved> resolved;
  std::array<shm::PlanAck, shm::kPlanAckSlots> acks{};
  auto popped = ring_.pop_acks(acks);
  if (!popped) return tl::unexpected(popped.error());
  for (std::size_t i = 0; i < *popped; ++i) {
    const shm::PlanAck& ack = acks[i];
    const auto it = std::find_if(plans_.begin(), plans_.end(), [&](const Plan& p) { return p.epoch == ack.epoch; });
    if (it == plans_.end()) {
      // A plan taken while its ack was on the way (its sequence closed): ignored, once.
      if (auto t = std::find(taken_.begin(), taken_.end(), ack.epoch); t != taken_.end()) {
        taken_.erase(t);
        continue;
      }
      return make_error(Errc::kProtocol, "plan ack of epoch " + std::to_string(ack.epoch) +
                                             ": that plan is already resolved (acknowledged twice)");
    }
    const auto index = it - plans_.begin();
    const bool applied = ack.outcome == static_cast<std::uint32_t>(shm::PlanOutcome::kApplied);
    ++(applied ? plans_acked_ : plans_failed_);
    roundtrip_.observe(std::chrono::steady_clock::now() - sent_at_[static_cast<std::size_t>(index)]);
    resolved.push_back(Resolved{std::move(*it), applied});
    plans_.erase(it);
    sent_at_.erase(sent_at_.begin() + index);
  }
  return resolved;
}

std::optional<PlanOutbox::Plan> PlanOutbox::take(std::uint32_t sequence) {
  const auto it = std::find_if(plans_.begin(), plans_.end(), [&](const Plan& p) { return p.sequence == sequence; });
  if (it == plans_.end()) return std::nullopt;
  std::optional<Plan> plan(std::move(*it));
  sent_at_.erase(sent_at_.begin() + (it - plans_.begin()));
  plans_.erase(it);
  taken_.push_back(plan->epoch);
  if (taken_.size() > kTakenRemembered) taken_.pop_front();
  return plan;
}

const PlanOutbox::Plan* PlanOutbox::in_flight(std::uint32_t sequence) const noexcept {
  const auto it = std::find_if(plans_.begin(), plans_.end(), [&](const Plan& p) { return p.sequence == sequence; });
  return it == plans_.end() ? nullptr : &*it;
}

}  // namespace kvtier::daemon
