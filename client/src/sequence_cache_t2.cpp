// SequenceCache's T2 (int8) paths: restoring T2 tokens into the engine's cache and staging
// layers whose host rows include T2 rows. Both go through the executor's int8 operations
// (executor.hpp: bind_int8, prefetch_mixed, restore_int8), so the CPU backend dequantizes with
// the CPU reference and the CUDA backend with the GPU dequantize kernel reading the pinned pool,
// bit for bit the same bytes.
#include <string>

#include "sequence_cache.hpp"

namespace kvtier::client {

Status SequenceCache::bind_int8() {
  if (int8_bound_) return {};
  if (!int8_) return make_error(Errc::kBadState, "T2 rows without an int8 pool");
  // Once per cache: CUDA registers the whole int8 pool pinned here and keeps it so.
  if (auto ok = executor_->bind_int8(int8_->desc()); !ok) return ok;
  int8_bound_ = true;
  return {};
}

Status SequenceCache::prepare_t2_restores(std::span<const kernels::RowCopy> copies, std::span<const std::uint32_t> slots) {
  t2_restores_.clear();
  if (copies.empty()) return {};
  if (auto ok = bind_int8(); !ok) return ok;
  // copies[i] = {hbm slot, i}: the executor takes the int8 slot in place of the pool slot.
  for (const kernels::RowCopy& copy : copies) {
    if (copy.pool_slot >= slots.size()) {
      return make_error(Errc::kInternal, "T2 restore names source " + std::to_string(copy.pool_slot) + " of " +
                                             std::to_string(slots.size()));
    }
    t2_restores_.push_back({copy.hbm_slot, slots[copy.pool_slot]});
  }
  return kernels::validate_int8_restores(layout_, int8_->desc(), t2_restores_);
}

Status SequenceCache::restore_t2(std::span<const kernels::RowCopy> copies) {
  if (copies.empty()) return {};
  return executor_->restore_int8(t2_restores_);
}

Status SequenceCache::prefetch_merged(std::uint32_t layer, kernels::StagingBuffer& out) {
  if (auto ok = bind_int8(); !ok) return ok;
  const auto order =
      *lists_order_ == KVTIER_STAGE_COMPACT ? kernels::StagingOrder::kCompact : kernels::StagingOrder::kPositionOrder;
  return executor_->prefetch_mixed(layer, list_slots_, list_t2_, list_positions_, order, out);
}

}  // namespace kvtier::client
