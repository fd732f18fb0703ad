// PoolTier: the toy client's T1 tier on top of a CopyExecutor.
#include "kvtier/toy/pool_tier.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace kvtier::toy {

using kernels::RowCopy;
using kernels::StagingOrder;

namespace {

Status check_distinct(std::span<const std::uint32_t> positions) {
  std::vector<std::uint32_t> sorted(positions.begin(), positions.end());
  std::sort(sorted.begin(), sorted.end());
  if (auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end()) {
    return make_error(Errc::kInvalidArgument,
                      "pool tier: position " + std::to_string(*dup) + " listed twice");
  }
  return {};
}

}  // namespace

PoolTier::PoolTier(ToyModel& model, kernels::CopyExecutor& executor, std::uint32_t pool_slots,
                   StagingOrder order)
    : model_(model), executor_(executor), order_(order) {
  const kernels::KvLayout& layout = model.layout();
  const std::size_t layer_stride = std::size_t{pool_slots} * layout.row_bytes();
  storage_.resize(layer_stride * layout.num_layers);
  pool_ = kernels::PoolView{storage_.data(), layout.row_bytes(), layer_stride, pool_slots,
                            layout.num_layers};
  for (std::uint32_t s = 0; s < pool_slots; ++s) free_rows_.insert(s);
}

Result<std::unique_ptr<PoolTier>> PoolTier::create(ToyModel& model, kernels::CopyExecutor& executor,
                                                   std::uint32_t pool_slots, StagingOrder order) {
  std::unique_ptr<PoolTier> tier(new PoolTier(model, executor, pool_slots, order));
  if (auto s = executor.initialize(model.layout(), tier->pool_); !s) {
    return tl::unexpected(s.error());
  }
  return tier;
}

Status PoolTier::offload(std::span<const std::uint32_t> positions) {
  if (positions.size() > free_rows_.size()) {
    return make_error(Errc::kLimitExceeded, "pool tier: " + std::to_string(positions.size()) +
                                                " rows, " + std::to_string(free_rows_.size()) +
                                                " free pool slots");
  }
  if (auto s = check_distinct(positions); !s) return s;
  std::vector<RowCopy> copies;
  auto row = free_rows_.begin();
  for (const std::uint32_t pos : positions) {
    const auto slot = model_.slot_of(pos);
    if (!slot) {
      return make_error(Errc::kInvalidArgument,
                        "pool tier: position " + std::to_string(pos) + " is not in T0");
    }
    copies.push_back(RowCopy{*slot, *row++});
  }
  if (auto s = executor_.offload(copies); !s) return s;
  for (std::size_t i = 0; i < positions.size(); ++i) {
    if (auto freed = model_.release(positions[i]); !freed) return tl::unexpected(freed.error());
    free_rows_.erase(copies[i].pool_slot);
    rows_.emplace(positions[i], copies[i].pool_slot);
  }
  planned_ = false;
  return executor_.synchronize();
}

Status PoolTier::restore(std::span<const std::uint32_t> positions) {
  if (auto s = check_distinct(positions); !s) return s;
  for (const std::uint32_t pos : positions) {
    if (!rows_.contains(pos)) {
      return make_error(Errc::kInvalidArgument,
                        "pool tier: position " + std::to_string(pos) + " is not in T1");
    }
  }
  if (positions.size() > model_.free_slot_count()) {
    return make_error(Errc::kLimitExceeded, "pool tier: not enough free HBM slots to restore");
  }
  std::vector<RowCopy> copies;
  for (const std::uint32_t pos : positions) {
    auto slot = model_.admit(pos);  // cannot fail: checked above
    copies.push_back(RowCopy{*slot, rows_.at(pos)});
  }
  if (auto s = executor_.restore(copies); !s) {
    for (const std::uint32_t pos : positions) (void)model_.release(pos);
    return s;
  }
  if (auto s = executor_.synchronize(); !s) return s;
  for (const std::uint32_t pos : positions) {
    free_rows_.insert(rows_.at(pos));
    rows_.erase(pos);
  }
  planned_ = false;
  return {};
}

Status PoolTier::evict(std::span<const std::uint32_t> positions) {
  for (const std::uint32_t pos : positions) {
    const auto it = rows_.find(pos);
    if (it == rows_.end()) {
      return make_error(Errc::kInvalidArgument,
                        "pool tier: position " + std::to_string(pos) + " is not in T1");
    }
    free_rows_.insert(it->second);
    rows_.erase(it);
  }
  planned_ = false;
  return {};
}

void PoolTier::set_order(StagingOrder order) noexcept {
  order_ = order;
  planned_ = false;
}

std::vector<std::uint32_t> PoolTier::t1_positions() const {
  std::vector<std::uint32_t> positions;
  for (const auto& entry : rows_) positions.push_back(entry.first);
  return positions;
}

// Position order: rows_ is already ascending by position. Compact: ascending pool slot, which
// is offload order, not position order.
void PoolTier::plan_staging() {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> rows(rows_.begin(), rows_.end());
  if (order_ == StagingOrder::kCompact) {
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second < b.second; });
  }
  stage_positions_.clear();
  stage_slots_.clear();
  for (const auto& [pos, slot] : rows) {
    stage_positions_.push_back(pos);
    stage_slots_.push_back(slot);
  }
  const std::size_t bytes = kernels::staging_bytes(pool_, rows.size());
  staging_.assign(bytes / sizeof(float) + 1, 0.0f);
  buffer_.data = reinterpret_cast<std::uintptr_t>(staging_.data());
  buffer_.capacity_bytes = staging_.size() * sizeof(float);
  planned_ = true;
}

Result<StagedRows> PoolTier::stage(std::uint32_t layer) {
  if (!planned_) plan_staging();
  if (auto s = executor_.prefetch(layer, stage_slots_, stage_positions_, order_, buffer_); !s) {
    return tl::unexpected(s.error());
  }
  if (auto s = executor_.wait(layer); !s) return tl::unexpected(s.error());
  return StagedRows{buffer_.positions, reinterpret_cast<const float*>(buffer_.k()),
                    reinterpret_cast<const float*>(buffer_.v()), buffer_.order};
}

}  // namespace kvtier::toy
