#include "sequence_cache.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "kvtier/kernels/executor_factory.hpp"
#include "kvtier/shm/records.hpp"

namespace kvtier::client {
namespace {

// The wire's tier codes (shm/records.hpp, the one definition). Plans reach this code as
// kvtier_plan_move, whose fields Client::poll_plan copies off the plan ring unchanged, so the C
// ABI's codes and no-slot sentinel must be the wire's; kvtier.h is plain C and cannot include
// records.hpp, hence these checks.
constexpr std::uint8_t kT0 = shm::kTierHbm, kT1 = shm::kTierDdr, kT2 = shm::kTierInt8, kT3 = shm::kTierDropped,
                       kTPeer = shm::kTierPeer;
static_assert(KVTIER_T0 == shm::kTierHbm && KVTIER_T1 == shm::kTierDdr && KVTIER_T2 == shm::kTierInt8 &&
              KVTIER_T3 == shm::kTierDropped && KVTIER_TPEER == shm::kTierPeer);
static_assert(KVTIER_NO_SLOT == shm::kNoSlot);
static_assert(sizeof(kvtier_plan_move::from_tier) == sizeof(shm::PlanMove::from_tier) &&
              sizeof(kvtier_plan_move::to_tier) == sizeof(shm::PlanMove::to_tier) &&
              sizeof(kvtier_plan_move::src_slot) == sizeof(shm::PlanMove::src_slot) &&
              sizeof(kvtier_plan_move::dst_slot) == sizeof(shm::PlanMove::dst_slot));

Error move_error(const kvtier_plan_move& m, const std::string& why) {
  return Error{Errc::kProtocol, "plan move T" + std::to_string(m.from_tier) + "->T" + std::to_string(m.to_tier) +
                                    " of position " + std::to_string(m.position) + ": " + why};
}

// The two passes of a hand-off copy through a bounce pool (copy_from_peer): peer slot -> bounce
// row i, then bounce row i -> engine slot (peer_copies[i] = {engine slot, peer slot}).
std::pair<std::vector<kernels::RowCopy>, std::vector<kernels::RowCopy>> bounce_passes(
    std::span<const kernels::RowCopy> peer_copies) {
  std::vector<kernels::RowCopy> reads, writes;
  for (std::uint32_t i = 0; i < peer_copies.size(); ++i) {
    reads.push_back({peer_copies[i].pool_slot, i});
    writes.push_back({peer_copies[i].hbm_slot, i});
  }
  return {std::move(reads), std::move(writes)};
}

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

Result<std::unique_ptr<SequenceCache>> SequenceCache::create(const kvtier_kv_layout& c, const kernels::PoolView& pool,
                                                             const std::optional<shm::Int8PoolView>& int8) {
  auto layout = to_kernel_layout(c);
  if (!layout) return tl::unexpected(layout.error());
  auto executor = kernels::make_executor(c.backend == KVTIER_BACKEND_CUDA ? kernels::Backend::kCuda
                                                                          : kernels::Backend::kCpu);
  if (!executor) return tl::unexpected(executor.error());
  if (auto ok = (*executor)->can_implement(*layout, pool); !ok) return tl::unexpected(ok.error());
  if (auto ok = (*executor)->initialize(*layout, pool); !ok) return tl::unexpected(ok.error());
  std::optional<Int8Rows> rows;
  if (int8) {
    auto made = Int8Rows::create(*int8, *layout);
    if (!made) return tl::unexpected(made.error());
    rows.emplace(std::move(*made));
  }
  std::unique_ptr<SequenceCache> cache(new SequenceCache(std::move(*executor), std::move(*layout), pool, std::move(rows)));
  if (cache->int8_) {
    if (auto ok = cache->bind_int8(); !ok) return tl::unexpected(ok.error());
  }
  return cache;
}

Status SequenceCache::relocate(const kvtier_kv_layout& c) {
  for (const Stage& stage : stages_) {
    if (stage.layer) return make_error(Errc::kBadState, "cannot move the cache while a layer is being prefetched");
  }
  if (peer_) return make_error(Errc::kBadState, "cannot move the cache while a hand-off is pending");
  auto layout = to_kernel_layout(c);
  if (!layout) return tl::unexpected(layout.error());
  const kernels::Backend backend = c.backend == KVTIER_BACKEND_CUDA ? kernels::Backend::kCuda : kernels::Backend::kCpu;
  if (layout->num_layers != layout_.num_layers || layout->num_kv_heads != layout_.num_kv_heads ||
      layout->head_dim != layout_.head_dim || layout->dtype != layout_.dtype || backend != executor_->backend()) {
    return make_error(Errc::kInvalidArgument,
                      "the moved cache must keep the attached layers, KV heads, head_dim, dtype and backend");
  }
  if (auto ok = executor_->can_implement(*layout, pool_); !ok) return ok;
  // initialize drops the int8 binding (CUDA: unregisters the int8 pool); bind it again.
  if (auto ok = executor_->initialize(*layout, pool_); !ok) return ok;
  layout_ = std::move(*layout);
  int8_bound_ = false;
  return int8_ ? bind_int8() : Status{};
}

Status SequenceCache::execute(const kvtier_plan& plan, std::span<const std::uint32_t> hbm_slots) {
  for (const Stage& stage : stages_) {
    if (stage.layer) {
      return make_error(Errc::kBadState, "layer " + std::to_string(*stage.layer) +
                                             " is being prefetched: wait for it before executing a plan");
    }
  }
  std::vector<kernels::RowCopy> offloads, restores, t2_restores, peer_copies;
  std::vector<std::uint32_t> t2_sources;  // int8 slot of each T2 -> T0 move
  for (std::size_t i = 0; i < plan.move_count; ++i) {
    const kvtier_plan_move& m = plan.moves[i];
    if ((m.from_tier == kT2 || m.to_tier == kT2) && !int8_) return tl::unexpected(move_error(m, "no int8 pool"));
    if (m.from_tier == kTPeer) continue;  // check_peer_moves
    if (m.from_tier == kT1 || m.from_tier == kT2) {
      const auto& resident = m.from_tier == kT1 ? t1_ : t2_;
      auto it = resident.find(m.position);
      if (it == resident.end() || it->second != m.src_slot) {
        return tl::unexpected(move_error(m, "slot " + std::to_string(m.src_slot) + " does not hold it"));
      }
    }
    if (m.from_tier == kT0 && m.to_tier == kT1) {
      offloads.push_back({hbm_slots[i], m.dst_slot});
    } else if (m.from_tier == kT1 && m.to_tier == kT0) {
      restores.push_back({hbm_slots[i], m.src_slot});
    } else if (m.from_tier == kT1 && m.to_tier == kT2) {
      // The daemon quantized the row already: only the reads move.
      if (m.dst_slot >= int8_->slots()) {
        return tl::unexpected(move_error(m, "int8 slot " + std::to_string(m.dst_slot) + " out of range"));
      }
    } else if (m.from_tier == kT2 && m.to_tier == kT0) {
      t2_restores.push_back({hbm_slots[i], static_cast<std::uint32_t>(t2_sources.size())});
      t2_sources.push_back(m.src_slot);
    } else if (!(m.to_tier == kT3 && m.from_tier <= kT2)) {
      return tl::unexpected(move_error(m, "not a move kvtierd makes"));
    }
  }
  // Check everything before copying anything (the executor checks each batch only as it runs).
  if (auto ok = kernels::validate_copies(layout_, pool_, kernels::Direction::kOffload, offloads); !ok) return ok;
  if (auto ok = kernels::validate_copies(layout_, pool_, kernels::Direction::kRestore, restores); !ok) return ok;
  if (auto ok = check_peer_moves(plan, hbm_slots, peer_copies); !ok) return ok;
  if (auto ok = prepare_t2_restores(t2_restores, t2_sources); !ok) return ok;
  if (auto ok = executor_->offload(offloads); !ok) return ok;
  if (auto ok = executor_->restore(restores); !ok) return ok;
  if (auto ok = restore_t2(t2_restores); !ok) return ok;
  if (auto ok = executor_->synchronize(); !ok) return ok;
  if (auto ok = copy_from_peer(peer_copies); !ok) return ok;
  for (std::size_t i = 0; i < plan.move_count; ++i) {
    const kvtier_plan_move& m = plan.moves[i];
    if (m.from_tier == kT1) t1_.erase(m.position);
    if (m.from_tier == kT2) t2_.erase(m.position);
    if (m.to_tier == kT1) t1_[m.position] = m.dst_slot;
    if (m.to_tier == kT2) t2_[m.position] = m.dst_slot;
  }
  lists_order_.reset();
  return {};
}

Status SequenceCache::set_peer(kernels::KvLayout layout, kernels::Backend backend) {
  if (layout.num_layers != layout_.num_layers || layout.num_kv_heads != layout_.num_kv_heads ||
      layout.head_dim != layout_.head_dim || layout.dtype != layout_.dtype) {
    return make_error(Errc::kInvalidArgument, "peer cache geometry (" + std::to_string(layout.num_layers) + " layers, " +
                                                  std::to_string(layout.num_kv_heads) + " kv heads, head_dim " +
                                                  std::to_string(layout.head_dim) + ") differs from this cache's");
  }
  if (auto ok = kernels::validate(layout); !ok) return ok;
  peer_ = Peer{std::move(layout), backend};
  return {};
}

Status SequenceCache::check_peer_moves(const kvtier_plan& plan, std::span<const std::uint32_t> hbm_slots,
                                       std::vector<kernels::RowCopy>& peer_copies) {
  std::set<std::uint32_t> positions, t1_slots, t2_slots;
  for (std::size_t i = 0; i < plan.move_count; ++i) {
    const kvtier_plan_move& m = plan.moves[i];
    if (m.from_tier != kTPeer) continue;
    if (!positions.insert(m.position).second) return tl::unexpected(move_error(m, "position named twice"));
    if (t1_.count(m.position) != 0 || t2_.count(m.position) != 0) {
      return tl::unexpected(move_error(m, "the position already has a host row"));
    }
    if (m.to_tier == kT0) {
      if (!peer_) return tl::unexpected(move_error(m, "no peer cache (not an adopted sequence, or its hand-off ran)"));
      if (m.src_slot >= peer_->layout.num_slots) {
        return tl::unexpected(move_error(m, "peer slot " + std::to_string(m.src_slot) + " out of range (peer has " +
                                                std::to_string(peer_->layout.num_slots) + ")"));
      }
      peer_copies.push_back({hbm_slots[i], m.src_slot});
    } else if (m.to_tier == kT1) {
      if (m.dst_slot >= pool_.slots) {
        return tl::unexpected(move_error(m, "pool slot " + std::to_string(m.dst_slot) + " out of range"));
      }
      if (!t1_slots.insert(m.dst_slot).second) {
        return tl::unexpected(move_error(m, "pool slot " + std::to_string(m.dst_slot) + " named twice"));
      }
    } else if (m.to_tier == kT2) {
      if (m.dst_slot >= int8_->slots()) {
        return tl::unexpected(move_error(m, "int8 slot " + std::to_string(m.dst_slot) + " out of range"));
      }
      if (!t2_slots.insert(m.dst_slot).second) {
        return tl::unexpected(move_error(m, "int8 slot " + std::to_string(m.dst_slot) + " named twice"));
      }
    } else {
      return tl::unexpected(move_error(m, "not a hand-off move kvtierd makes"));
    }
  }
  for (const auto& [position, slot] : t1_) {
    if (t1_slots.count(slot) != 0) {
      return make_error(Errc::kProtocol, "hand-off move into pool slot " + std::to_string(slot) +
                                             ", which holds position " + std::to_string(position));
    }
  }
  for (const auto& [position, slot] : t2_) {
    if (t2_slots.count(slot) != 0) {
      return make_error(Errc::kProtocol, "hand-off move into int8 slot " + std::to_string(slot) +
                                             ", which holds position " + std::to_string(position));
    }
  }
  if (peer_copies.empty()) return {};
  // The two passes copy_from_peer makes, checked on a bounce pool of one row per copy: engine
  // slots in range and distinct.
  const auto n = static_cast<std::uint32_t>(peer_copies.size());
  const kernels::PoolView bounce{nullptr, row_bytes_, std::size_t{n} * row_bytes_, n, layout_.num_layers};
  const auto [reads, writes] = bounce_passes(peer_copies);
  if (auto ok = kernels::validate_copies(peer_->layout, bounce, kernels::Direction::kOffload, reads); !ok) return ok;
  return kernels::validate_copies(layout_, bounce, kernels::Direction::kRestore, writes);
}

Status SequenceCache::copy_from_peer(std::span<const kernels::RowCopy> peer_copies) {
  if (peer_copies.empty()) return {};
  // A one-time cost per hand-off, so no dedicated kernel: the rows go peer cache -> host bounce
  // pool -> this cache along the ordinary offload and restore paths, by an executor bound first
  // to (peer layout, bounce) and then to (this layout, bounce). With CUDA each binding registers
  // the bounce pinned and rebinding unregisters it again.
  const auto n = static_cast<std::uint32_t>(peer_copies.size());
  constexpr std::size_t kPage = 4096;
  const std::size_t bytes = (std::size_t{n} * row_bytes_ * layout_.num_layers + kPage - 1) / kPage * kPage;
  struct Free {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> memory(static_cast<std::byte*>(std::aligned_alloc(kPage, bytes)));
  if (!memory) return make_error(Errc::kLimitExceeded, "hand-off bounce pool of " + std::to_string(bytes) + " bytes");
  const kernels::PoolView bounce{memory.get(), row_bytes_, std::size_t{n} * row_bytes_, n, layout_.num_layers};
  const auto [reads, writes] = bounce_passes(peer_copies);
  auto made = kernels::make_executor(peer_->backend);
  if (!made) return tl::unexpected(made.error());
  std::unique_ptr<kernels::CopyExecutor> executor = std::move(*made);
  if (auto ok = executor->initialize(peer_->layout, bounce); !ok) return ok;
  if (auto ok = executor->offload(reads); !ok) return ok;
  if (auto ok = executor->synchronize(); !ok) return ok;
  if (executor->backend() != backend()) {
    executor.reset();
    made = kernels::make_executor(backend());
    if (!made) return tl::unexpected(made.error());
    executor = std::move(*made);
  }
  if (auto ok = executor->initialize(layout_, bounce); !ok) return ok;
  if (auto ok = executor->restore(writes); !ok) return ok;
  return executor->synchronize();
}

void SequenceCache::build_lists(kvtier_staging_order order) {
  if (lists_order_ == order) return;
  struct Row {
    std::uint32_t position, slot;
    std::uint8_t t2;
  };
  std::vector<Row> rows;
  rows.reserve(staged_rows());
  for (const auto& [position, slot] : t1_) rows.push_back({position, slot, 0});
  for (const auto& [position, slot] : t2_) rows.push_back({position, slot, 1});
  if (order == KVTIER_STAGE_COMPACT) {
    // Pool order, T1 rows then T2 rows: the cheapest to read, no longer sorted by position.
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return std::tie(a.t2, a.slot) < std::tie(b.t2, b.slot); });
  } else if (!t2_.empty()) {
    // Both maps are sorted and disjoint: one merge gives ascending positions.
    std::inplace_merge(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(t1_.size()), rows.end(),
                       [](const Row& a, const Row& b) { return a.position < b.position; });
  }
  list_positions_.clear();
  list_slots_.clear();
  list_t2_.clear();
  for (const Row& row : rows) {
    list_positions_.push_back(row.position);
    list_slots_.push_back(row.slot);
    list_t2_.push_back(row.t2);
  }
  lists_order_ = order;
}

Status SequenceCache::prefetch(std::uint32_t layer, kvtier_staging_order order, void* buffer, std::size_t capacity) {
  Stage* free = nullptr;
  for (Stage& stage : stages_) {
    if (stage.layer == layer) {
      return make_error(Errc::kBadState, "layer " + std::to_string(layer) + " is already being prefetched");
    }
    if (!stage.layer && free == nullptr) free = &stage;
  }
  if (free == nullptr) {
    return make_error(Errc::kBadState, "two layers are being prefetched already: wait for one first");
  }
  build_lists(order);
  free->buffer.data = reinterpret_cast<std::uintptr_t>(buffer);
  free->buffer.capacity_bytes = buffer == nullptr ? 0 : capacity;
  const auto kernel_order =
      order == KVTIER_STAGE_COMPACT ? kernels::StagingOrder::kCompact : kernels::StagingOrder::kPositionOrder;
  Status issued = !t2_.empty() ? prefetch_merged(layer, free->buffer)
                               : executor_->prefetch(layer, list_slots_, list_positions_, kernel_order, free->buffer);
  if (issued) free->layer = layer;
  return issued;
}

Status SequenceCache::stage_at(std::uint32_t layer, const kernels::PositionTarget& target) {
  if (auto ok = host_rows_at_rest(); !ok) return ok;
  return executor_->stage_at(layer, list_slots_, from_int8(), list_positions_, target);
}

Status SequenceCache::attend(std::uint32_t layer, std::span<const std::uint32_t> t0_slots, std::size_t t0_tokens,
                            const kernels::HostQuery& query, const kernels::AttendOutput& out) {
  if (auto ok = host_rows_at_rest(); !ok) return ok;
  return executor_->attend(layer, t0_slots, t0_tokens, list_slots_, from_int8(), query, out);
}

Status SequenceCache::host_rows_at_rest() {
  for (const Stage& stage : stages_) {
    if (stage.layer) {
      return make_error(Errc::kBadState, "layer " + std::to_string(*stage.layer) + " is being prefetched");
    }
  }
  build_lists(KVTIER_STAGE_POSITION_ORDER);
  if (!t2_.empty()) return bind_int8();
  return {};
}

std::span<const std::uint8_t> SequenceCache::from_int8() const {
  return t2_.empty() ? std::span<const std::uint8_t>{} : std::span<const std::uint8_t>{list_t2_};
}

Result<kvtier_staged_layer> SequenceCache::wait(std::uint32_t layer) {
  for (Stage& stage : stages_) {
    if (stage.layer != layer) continue;
    stage.layer.reset();  // the slot is free for the next prefetch, the view valid until then
    if (auto ok = executor_->wait(layer); !ok) return tl::unexpected(ok.error());
    const kernels::StagingBuffer& b = stage.buffer;
    return kvtier_staged_layer{layer, b.rows, b.positions.data(), reinterpret_cast<const void*>(b.k()),
                               reinterpret_cast<const void*>(b.v())};
  }
  return make_error(Errc::kBadState, "layer " + std::to_string(layer) + " was not prefetched");
}

Result<kvtier_staged_layer> SequenceCache::stage(std::uint32_t layer, kvtier_staging_order order, void* buffer,
                                                 std::size_t capacity) {
  if (auto ok = prefetch(layer, order, buffer, capacity); !ok) return tl::unexpected(ok.error());
  return wait(layer);
}

}  // namespace kvtier::client
