// PlanTransaction: slot bookkeeping around one unacknowledged plan.
#include "kvtier/tier/plan_transaction.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "kvtier/base/check.hpp"

namespace kvtier::tier {
namespace {

Status disagree(const TierMove& move, const std::string& why) {
  return make_error(Errc::kInternal, "plan move at position " + std::to_string(move.position) +
                                         " (" + std::string(tier_name(move.from)) + " -> " +
                                         std::string(tier_name(move.to)) + "): " + why);
}

// The move's source slot in its tier's map (kNoSlot for moves out of T0 or T3), or the reason the
// plan and the committed state disagree.
Result<std::uint32_t> source_of(const TierMove& move, const PoolSlots& pools) {
  if (move.to == Tier::kT2 && move.from != Tier::kT1) {
    return tl::unexpected(disagree(move, "T2 is filled from T1 only").error());
  }
  if (move.from == Tier::kT2 && move.to == Tier::kT1) {
    return tl::unexpected(disagree(move, "a T2 token never returns to T1").error());
  }
  std::uint32_t slot = kNoSlot;
  if (move.from == Tier::kT1) {
    slot = pools.t1_map.slot_of(move.position);
    if (slot == kNoSlot) return tl::unexpected(disagree(move, "no T1 pool slot").error());
  } else if (move.from == Tier::kT2) {
    if (pools.t2_map == nullptr || pools.t2 == nullptr) {
      return tl::unexpected(disagree(move, "no T2 pool given").error());
    }
    slot = pools.t2_map->slot_of(move.position);
    if (slot == kNoSlot) return tl::unexpected(disagree(move, "no T2 pool slot").error());
  }
  return slot;
}

}  // namespace

Result<PlanTransaction> PlanTransaction::prepare(std::span<const TierMove> moves,
                                                 const SlotMap& slots, SlotAllocator& allocator) {
  return prepare(moves, PoolSlots{slots, allocator});
}

Result<PlanTransaction> PlanTransaction::prepare(std::span<const TierMove> moves,
                                                 const PoolSlots& pools) {
  // Check every source first, so an error never leaves a half-filled T2 block behind.
  std::uint32_t t2_remaining = 0;  // moves into T2 not yet placed or trimmed
  for (const TierMove& move : moves) {
    if (auto source = source_of(move, pools); !source) return tl::unexpected(source.error());
    t2_remaining += move.to == Tier::kT2 ? 1u : 0u;
  }

  PlanTransaction plan(pools.t1, pools.t2);
  plan.planned_.reserve(moves.size());
  plan.accepted_.reserve(moves.size());
  std::uint32_t t1_taken = 0;
  std::uint32_t block_first = 0;
  std::uint32_t block_rows = 0;
  std::uint32_t block_used = 0;
  bool t2_full = pools.t2 == nullptr;
  for (const TierMove& move : moves) {
    PlannedMove planned{move.position, move.from, move.to, *source_of(move, pools), kNoSlot};
    if (move.to == Tier::kT1) {
      const std::optional<std::uint32_t> slot =
          t1_taken < pools.t1_limit ? pools.t1.allocate() : std::nullopt;
      if (!slot) {
        ++plan.trimmed_;  // the token keeps its tier; the next decision tries again
        continue;
      }
      ++t1_taken;
      planned.destination_slot = *slot;
    } else if (move.to == Tier::kT2) {
      --t2_remaining;
      if (!t2_full && block_used == block_rows) {
        // A fresh block sized for what is left, so only the plan's last block is partly used.
        const std::uint32_t rows = std::min(pools.t2->group(), t2_remaining + 1);
        const std::optional<std::uint32_t> first = pools.t2->allocate_block(rows);
        if (first) {
          block_first = *first;
          block_rows = rows;
          block_used = 0;
          plan.t2_blocks_.push_back(
              {*first, rows, static_cast<std::uint32_t>(plan.planned_.size())});
        } else {
          t2_full = true;
        }
      }
      if (t2_full) {
        ++plan.trimmed_t2_;  // the token stays in T1
        continue;
      }
      planned.destination_slot = block_first + block_used++;
    }
    plan.touches_t2_ = plan.touches_t2_ || move.from == Tier::kT2 || move.to == Tier::kT2;
    plan.planned_.push_back(planned);
    plan.accepted_.push_back(move);
  }
  return plan;
}

PlanTransaction::PlanTransaction(PlanTransaction&& other) noexcept
    : t1_(std::exchange(other.t1_, nullptr)),
      t2_(std::exchange(other.t2_, nullptr)),
      planned_(std::move(other.planned_)),
      accepted_(std::move(other.accepted_)),
      t2_blocks_(std::move(other.t2_blocks_)),
      trimmed_(other.trimmed_),
      trimmed_t2_(other.trimmed_t2_),
      touches_t2_(other.touches_t2_) {}

PlanTransaction& PlanTransaction::operator=(PlanTransaction&& other) noexcept {
  if (this != &other) {
    if (open()) (void)rollback();
    t1_ = std::exchange(other.t1_, nullptr);
    t2_ = std::exchange(other.t2_, nullptr);
    planned_ = std::move(other.planned_);
    accepted_ = std::move(other.accepted_);
    t2_blocks_ = std::move(other.t2_blocks_);
    trimmed_ = other.trimmed_;
    trimmed_t2_ = other.trimmed_t2_;
    touches_t2_ = other.touches_t2_;
  }
  return *this;
}

PlanTransaction::~PlanTransaction() {
  if (open()) (void)rollback();
}

Status PlanTransaction::commit(SlotMap& slots) { return commit(slots, nullptr); }

Status PlanTransaction::commit(SlotMap& t1_map, SlotMap* t2_map) {
  KVTIER_CHECK(open(), "commit() of a closed plan transaction");
  KVTIER_CHECK(t2_map != nullptr || !touches_t2_, "commit() of a T2 plan without a T2 map");
  Status first_error;
  const auto keep_first = [&first_error](Status status) {
    if (!status && first_error) first_error = std::move(status);
  };
  for (const PlannedMove& move : planned_) {
    if (move.source_slot != kNoSlot) {
      if (move.from == Tier::kT1) {
        t1_map.set(move.position, kNoSlot);
        keep_first(t1_->release(move.source_slot));
      } else {
        t2_map->set(move.position, kNoSlot);
        keep_first(t2_->release(move.source_slot));
      }
    }
    if (move.destination_slot != kNoSlot) {
      (move.to == Tier::kT1 ? t1_map : *t2_map).set(move.position, move.destination_slot);
    }
  }
  t1_ = nullptr;
  return first_error;
}

Status PlanTransaction::rollback() {
  KVTIER_CHECK(open(), "rollback() of a closed plan transaction");
  Status first_error;
  for (const PlannedMove& move : planned_) {
    if (move.destination_slot == kNoSlot) continue;
    Status status = move.to == Tier::kT1 ? t1_->release(move.destination_slot)
                                         : t2_->release(move.destination_slot);
    if (!status && first_error) first_error = std::move(status);
  }
  t1_ = nullptr;
  return first_error;
}

}  // namespace kvtier::tier
