#include "sequence_cache.hpp"

#include <algorithm>

namespace kvtier::client {
namespace {

constexpr std::uint8_t kT0 = KVTIER_T0, kT1 = KVTIER_T1, kT3 = KVTIER_T3;

Result<kernels::KvLayout> to_kernel_layout(const kvtier_kv_layout& c) {
  if (c.k_base == nullptr || c.v_base == nullptr || c.num_layers == 0) {
    return make_error(Errc::kInvalidArgument, "layout needs num_layers > 0 and k_base/v_base arrays");
  }
  kernels::KvLayout layout;
  layout.num_layers = c.num_layers;
  layout.num_kv_heads = c.num_kv_heads;
  layout.head_dim = c.head_dim;
  switch (c.dtype) {
    case KVTIER_DTYPE_F16: layout.dtype = kernels::KvDtype::kF16; break;
    case KVTIER_DTYPE_BF16: layout.dtype = kernels::KvDtype::kBf16; break;
    case KVTIER_DTYPE_F32: layout.dtype = kernels::KvDtype::kF32; break;
    default: return make_error(Errc::kInvalidArgument, "unknown dtype");
  }
  layout.num_slots = c.num_slots;
  layout.block_size = c.block_size;
  layout.token_stride = c.token_stride;
  layout.head_stride = c.head_stride;
  layout.block_stride = c.block_stride;
  layout.k_base.assign(c.k_base, c.k_base + c.num_layers);
  layout.v_base.assign(c.v_base, c.v_base + c.num_layers);
  if (auto ok = kernels::validate(layout); !ok) return tl::unexpected(ok.error());
  return layout;
}

}  // namespace

Result<std::unique_ptr<SequenceCache>> SequenceCache::create(const kvtier_kv_layout& c, const kernels::PoolView& pool) {
  auto layout = to_kernel_layout(c);
  if (!layout) return tl::unexpected(layout.error());
  auto executor = kernels::make_executor(c.backend == KVTIER_BACKEND_CUDA ? kernels::Backend::kCuda
                                                                          : kernels::Backend::kCpu);
  if (!executor) return tl::unexpected(executor.error());
  if (auto ok = (*executor)->can_implement(*layout, pool); !ok) return tl::unexpected(ok.error());
  if (auto ok = (*executor)->initialize(*layout, pool); !ok) return tl::unexpected(ok.error());
  return std::unique_ptr<SequenceCache>(new SequenceCache(std::move(*executor), pool.row_bytes));
}

Status SequenceCache::execute(const kvtier_plan& plan, std::span<const std::uint32_t> hbm_slots) {
  std::vector<kernels::RowCopy> offloads, restores;
  for (std::size_t i = 0; i < plan.move_count; ++i) {
    const kvtier_plan_move& m = plan.moves[i];
    const bool t1_source = m.from_tier == kT1;
    if (t1_source) {
      auto it = t1_.find(m.position);
      if (it == t1_.end() || it->second != m.src_slot) {
        return make_error(Errc::kProtocol, "plan moves position " + std::to_string(m.position) +
                                               " out of pool slot " + std::to_string(m.src_slot) +
                                               ", which does not hold it");
      }
    }
    if (m.from_tier == kT0 && m.to_tier == kT1) {
      offloads.push_back({hbm_slots[i], m.dst_slot});
    } else if (m.from_tier == kT1 && m.to_tier == kT0) {
      restores.push_back({hbm_slots[i], m.src_slot});
    } else if (!(m.to_tier == kT3 && (m.from_tier == kT0 || m.from_tier == kT1))) {
      return make_error(Errc::kInvalidArgument, "move T" + std::to_string(m.from_tier) + "->T" +
                                                    std::to_string(m.to_tier) + " is not supported by this client");
    }
  }
  // The executor validates every copy before it copies anything.
  if (auto ok = executor_->offload(offloads); !ok) return ok;
  if (auto ok = executor_->restore(restores); !ok) return ok;
  if (auto ok = executor_->synchronize(); !ok) return ok;
  for (std::size_t i = 0; i < plan.move_count; ++i) {
    const kvtier_plan_move& m = plan.moves[i];
    if (m.from_tier == kT1) t1_.erase(m.position);
    if (m.to_tier == kT1) t1_[m.position] = m.dst_slot;
  }
  lists_order_.reset();
  return {};
}

void SequenceCache::build_lists(kvtier_staging_order order) {
  if (lists_order_ == order) return;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> rows(t1_.begin(), t1_.end());  // (position, slot)
  if (order == KVTIER_STAGE_COMPACT) {
    // Pool order: the cheapest to read, no longer sorted by position.
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  }
  list_positions_.clear();
  list_slots_.clear();
  for (const auto& [position, slot] : rows) {
    list_positions_.push_back(position);
    list_slots_.push_back(slot);
  }
  lists_order_ = order;
}

Result<kvtier_staged_layer> SequenceCache::stage(std::uint32_t layer, kvtier_staging_order order, void* buffer,
                                                 std::size_t capacity) {
  build_lists(order);
  const auto kernel_order =
      order == KVTIER_STAGE_COMPACT ? kernels::StagingOrder::kCompact : kernels::StagingOrder::kPositionOrder;
  staging_.data = reinterpret_cast<std::uintptr_t>(buffer);
  staging_.capacity_bytes = capacity;
  if (auto ok = executor_->prefetch(layer, list_slots_, list_positions_, kernel_order, staging_); !ok) {
    return tl::unexpected(ok.error());
  }
  if (auto ok = executor_->wait(layer); !ok) return tl::unexpected(ok.error());
  return kvtier_staged_layer{layer, staging_.rows, staging_.positions.data(), reinterpret_cast<const void*>(staging_.k()),
                             reinterpret_cast<const void*>(staging_.v())};
}

}  // namespace kvtier::client
