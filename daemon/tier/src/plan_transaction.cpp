// PlanTransaction: slot bookkeeping around one unacknowledged plan.
#include "kvtier/tier/plan_transaction.hpp"

#include <string>
#include <utility>

#include "contract.hpp"

namespace kvtier::tier {

Result<PlanTransaction> PlanTransaction::prepare(std::span<const TierMove> moves,
                                                 const SlotMap& slots, SlotAllocator& allocator) {
  PlanTransaction plan(allocator);
  plan.planned_.reserve(moves.size());
  plan.accepted_.reserve(moves.size());
  for (const TierMove& move : moves) {
    PlannedMove planned{move.position, move.from, move.to, kNoSlot, kNoSlot};
    if (move.from == Tier::kT1) {
      planned.source_slot = slots.slot_of(move.position);
      if (planned.source_slot == kNoSlot) {
        // plan's destructor returns what was allocated so far.
        return make_error(Errc::kInternal, "T1 token at position " +
                                               std::to_string(move.position) +
                                               " has no pool slot");
      }
    }
    if (move.to == Tier::kT1) {
      const std::optional<std::uint32_t> slot = allocator.allocate();
      if (!slot) {
        ++plan.trimmed_;  // the token keeps its tier; the next decision tries again
        continue;
      }
      planned.destination_slot = *slot;
    }
    plan.planned_.push_back(planned);
    plan.accepted_.push_back(move);
  }
  return plan;
}

PlanTransaction::PlanTransaction(PlanTransaction&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)),
      planned_(std::move(other.planned_)),
      accepted_(std::move(other.accepted_)),
      trimmed_(other.trimmed_) {}

PlanTransaction& PlanTransaction::operator=(PlanTransaction&& other) noexcept {
  if (this != &other) {
    if (open()) (void)rollback();
    allocator_ = std::exchange(other.allocator_, nullptr);
    planned_ = std::move(other.planned_);
    accepted_ = std::move(other.accepted_);
    trimmed_ = other.trimmed_;
  }
  return *this;
}

PlanTransaction::~PlanTransaction() {
  if (open()) (void)rollback();
}

Status PlanTransaction::commit(SlotMap& slots) {
  detail::require(open(), "commit() of a closed plan transaction");
  Status first_error;
  for (const PlannedMove& move : planned_) {
    if (move.source_slot != kNoSlot) {
      slots.set(move.position, kNoSlot);
      if (auto status = allocator_->release(move.source_slot); !status && first_error) {
        first_error = status;
      }
    }
    if (move.destination_slot != kNoSlot) slots.set(move.position, move.destination_slot);
  }
  allocator_ = nullptr;
  return first_error;
}

Status PlanTransaction::rollback() {
  detail::require(open(), "rollback() of a closed plan transaction");
  Status first_error;
  for (const PlannedMove& move : planned_) {
    if (move.destination_slot == kNoSlot) continue;
    if (auto status = allocator_->release(move.destination_slot); !status && first_error) {
      first_error = status;
    }
  }
  allocator_ = nullptr;
  return first_error;
}

}  // namespace kvtier::tier
