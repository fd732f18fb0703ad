// CopyExecutor: runs copy plans and per-layer staging between an engine's KV cache (KvLayout,
// tier T0) and its T1 pool (PoolView). One interface, one implementation per backend: the CPU
// reference (memcpy, always built) and CUDA (when built; DMA from pinned pool memory, gather
// kernels, a dedicated copy stream).
//
// Lifecycle, after CUTLASS: can_implement(layout, pool) says whether this backend can serve the
// pair (no side effects); initialize(layout, pool) binds them (and repeats can_implement); then
// the operations. Every operation validates its arguments first and on failure copies nothing.
// Besides copies, the CPU backend attends a decode query over a layer's rows where they live
// (attend: the T0 slots and the host rows, nothing staged).
//
// The int8 tier (T2): after initialize, bind_int8(pool) binds the client's int8 pool (CUDA:
// registers its pages pinned once, until rebind or destruction); prefetch_mixed then stages
// layers whose rows come from both pools (T1 rows copied, T2 rows dequantized into the model
// dtype, bit for bit the CPU reference of quantize.hpp) and restore_int8 dequantizes T2 rows into
// the engine's cache. initialize drops the int8 binding.
//
// Completion: operations may run asynchronously. wait(layer) returns once every prefetch of that
// layer issued so far has landed; synchronize() once every operation issued so far has. The CPU
// backend completes each operation before returning, so both are no-ops there.
//
// Thread-safety: an executor is used by one thread at a time. It does not own the engine's
// cache, the pool or staging memory; they must outlive the operations that touch them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string_view>

#include "kvtier/kernels/copy_plan.hpp"
#include "kvtier/kernels/host_attention.hpp"
#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/kernels/pool_view.hpp"
#include "kvtier/kernels/quantize.hpp"
#include "kvtier/kernels/staging.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::kernels {

enum class Backend : std::uint8_t { kCpu = 0, kCuda = 1 };

std::string_view backend_name(Backend backend) noexcept;

inline constexpr std::uint32_t kAllLayers = std::numeric_limits<std::uint32_t>::max();

// The client's int8 (T2) pool as an executor reads it (block format in quantize.hpp): per layer
// `blocks` blocks of geometry.block_bytes(), block b of layer l at
//   base + l * layer_stride + b * geometry.block_bytes()
// and int8 slot s is row s % G of block s / G in every layer (G = geometry.group_tokens), as
// shm/.../int8_pool_geometry.hpp lays the pool out. Non-owning, like PoolView.
struct Int8PoolDesc {
  const std::byte* base = nullptr;  // host address of layer 0, block 0; not owned
  Int8Geometry geometry;
  std::size_t layer_stride = 0;
  std::uint32_t blocks = 0;  // per layer
  std::uint32_t num_layers = 0;

  std::uint32_t slots() const noexcept { return blocks * geometry.group_tokens; }
  // Bytes from base to the end of the last block: what must be mapped (and registered).
  std::size_t extent() const noexcept {
    return std::size_t{num_layers - 1} * layer_stride + std::size_t{blocks} * geometry.block_bytes();
  }
  // Precondition: layer < num_layers, block < blocks.
  const std::byte* block(std::uint32_t layer, std::uint32_t block) const noexcept {
    return base + std::size_t{layer} * layer_stride + std::size_t{block} * geometry.block_bytes();
  }
};

// The int8 pool can serve `layout`: a valid geometry with the layout's KV heads, head_dim and
// dtype, as many layers, blocks >= 1 (fewer than 2^31 slots), a non-null base aligned to 16
// bytes, layer_stride >= blocks * block_bytes and a multiple of 16. kInvalidArgument naming the
// field otherwise.
Status check_compatible(const KvLayout& layout, const Int8PoolDesc& int8);

// Checks a prefetch_mixed request: from_int8 has one entry per slot; each slot is below the
// slots of its pool (`pool` when from_int8[i] == 0, else `int8`); then as validate_staging
// (layer, positions, order, buffer room for every row at pool.row_bytes). kInvalidArgument.
Status validate_mixed_staging(const PoolView& pool, const Int8PoolDesc& int8, std::uint32_t layer,
                              std::span<const std::uint32_t> slots,
                              std::span<const std::uint8_t> from_int8,
                              std::span<const std::uint32_t> positions, StagingOrder order,
                              const StagingBuffer& buffer);

// Checks a restore_int8 list: every hbm_slot < layout.num_slots, every pool_slot (an int8 slot)
// < int8.slots(), HBM slots pairwise distinct. kInvalidArgument naming the first bad entry.
Status validate_int8_restores(const KvLayout& layout, const Int8PoolDesc& int8,
                              std::span<const RowCopy> copies);

class CopyExecutor {
 public:
  virtual ~CopyExecutor() = default;
  CopyExecutor(const CopyExecutor&) = delete;
  CopyExecutor& operator=(const CopyExecutor&) = delete;

  virtual Backend backend() const noexcept = 0;

  // kInvalidArgument when layout or pool is invalid or they do not match (check_compatible);
  // kUnavailable when this backend cannot reach the memory they describe.
  virtual Status can_implement(const KvLayout& layout, const PoolView& pool) const = 0;

  // Binds layout and pool (copies the descriptors, not the memory); may be called again to
  // rebind. Operations before a successful initialize fail with kBadState.
  virtual Status initialize(const KvLayout& layout, const PoolView& pool) = 0;

  // Copies whole tokens (K and V, every KV head) for layers [first_layer, first_layer + count)
  // (count kAllLayers: to the last layer). Copies are checked by validate_copies.
  virtual Status copy_layers(Direction direction, std::span<const RowCopy> copies,
                             std::uint32_t first_layer, std::uint32_t count) = 0;

  // T0 -> T1 for all layers.
  Status offload(std::span<const RowCopy> copies) {
    return copy_layers(Direction::kOffload, copies, 0, kAllLayers);
  }
  // T1 -> T0 for all layers.
  Status restore(std::span<const RowCopy> copies) {
    return copy_layers(Direction::kRestore, copies, 0, kAllLayers);
  }

  // Stages pool rows `pool_slots` of one layer into `out` (layout and ordering contract in
  // staging.hpp), before that layer's attention. `positions` are the rows' absolute positions:
  // required and strictly ascending for kPositionOrder, optional for kCompact. Fills out's
  // metadata (layer, rows, half_row_bytes, order, positions).
  virtual Status prefetch(std::uint32_t layer, std::span<const std::uint32_t> pool_slots,
                          std::span<const std::uint32_t> positions, StagingOrder order,
                          StagingBuffer& out) = 0;

  // Binds the int8 pool (copies the descriptor, not the memory) until the next bind_int8,
  // initialize or destruction; a previous int8 binding is released first. kBadState before
  // initialize; kInvalidArgument when check_compatible(layout, int8) fails; on failure the
  // executor has no int8 pool. CUDA registers the pool's pages (mapped, portable) here, once.
  virtual Status bind_int8(const Int8PoolDesc& int8) = 0;

  // prefetch for a layer whose host rows come from both pools: staged row i is int8 slot
  // slots[i] dequantized to the layout's dtype when from_int8[i] != 0, else pool slot slots[i]
  // copied exactly. Same output layout, order contract and metadata as prefetch
  // (validate_mixed_staging). kBadState without bind_int8.
  virtual Status prefetch_mixed(std::uint32_t layer, std::span<const std::uint32_t> slots,
                                std::span<const std::uint8_t> from_int8,
                                std::span<const std::uint32_t> positions, StagingOrder order,
                                StagingBuffer& out) = 0;

  // T2 -> T0 for all layers: copies[i].pool_slot is an int8 slot, dequantized into HBM slot
  // copies[i].hbm_slot (validate_int8_restores; nothing is written when it fails). kBadState
  // without bind_int8. Completes like copy_layers (synchronize() waits for it).
  virtual Status restore_int8(std::span<const RowCopy> copies) = 0;

  // Stages one layer's host rows straight into the engine's position-indexed view of that layer
  // (`target`, staging.hpp): row i, pool slot slots[i] (an int8 slot, dequantized, where
  // from_int8[i] != 0; from_int8 may be empty: all T1), lands at positions[i]. One copy per row
  // and no staging buffer, for an engine that assembles each layer's keys and values in position
  // order itself (kvtier.hf on the CPU). Complete when it returns. kInvalidArgument, nothing
  // written, when validate_position_target fails; kBadState before initialize or, with flagged
  // rows, without bind_int8. The base returns kUnavailable: only the CPU backend implements it
  // (CUDA engines prefetch, which overlaps with compute).
  virtual Status stage_at(std::uint32_t layer, std::span<const std::uint32_t> slots,
                          std::span<const std::uint8_t> from_int8, std::span<const std::uint32_t> positions,
                          const PositionTarget& target);

  // One decode query's attention over one layer's rows where they live (attend_rows,
  // host_attention.hpp), nothing copied. A row of the layout holds n = layout head_dim /
  // query.head_dim tokens per head (1 unless the engine's slot is a block of tokens). The keys:
  // first the first t0_tokens tokens of the engine's cache slots t0_slots (n per slot, the last
  // slot may give fewer; none when t0_slots is empty), then the n tokens of each host row i = pool
  // slot slots[i], or int8 slot slots[i] dequantized where from_int8[i] != 0 (from_int8 may be
  // empty: all T1); probs and scores columns in that order. Complete when it returns.
  // kInvalidArgument, nothing written, when a slot (validate_host_rows, t0 slots below the
  // layout's), t0_tokens or the request (validate_host_attention) is bad; kBadState before
  // initialize or, with flagged rows, without bind_int8. The base returns kUnavailable: only the
  // CPU backend implements it.
  virtual Status attend(std::uint32_t layer, std::span<const std::uint32_t> t0_slots, std::size_t t0_tokens,
                        std::span<const std::uint32_t> slots, std::span<const std::uint8_t> from_int8,
                        const HostQuery& query, const AttendOutput& out);

  // Waits for this layer's prefetches issued so far.
  virtual Status wait(std::uint32_t layer) = 0;
  // Waits for every operation issued so far.
  virtual Status synchronize() = 0;

  // The engine's compute stream (a cudaStream_t as an integer; 0 = none): CUDA orders its copies
  // with it (cuda_executor.hpp); the CPU backend completes every operation before returning and
  // ignores it.
  virtual void set_compute_stream(std::uintptr_t /*stream*/) noexcept {}

 protected:
  CopyExecutor() = default;
};

}  // namespace kvtier::kernels
