// CopyExecutor: runs copy plans and per-layer staging between an engine's KV cache (KvLayout,
// tier T0) and its T1 pool (PoolView). One interface, one implementation per backend: the CPU
// reference (memcpy, always built) and CUDA (when built; DMA from pinned pool memory, gather
// kernels, a dedicated copy stream).
//
// Lifecycle, after CUTLASS: can_implement(layout, pool) says whether this backend can serve the
// pair (no side effects); initialize(layout, pool) binds them (and repeats can_implement); then
// the operations. Every operation validates its arguments first and on failure copies nothing.
//
// Completion: operations may run asynchronously. wait(layer) returns once every prefetch of that
// layer issued so far has landed; synchronize() once every operation issued so far has. The CPU
// backend completes each operation before returning, so both are no-ops there.
//
// Thread-safety: an executor is used by one thread at a time. It does not own the engine's
// cache, the pool or staging memory; they must outlive the operations that touch them.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string_view>

#include "kvtier/kernels/copy_plan.hpp"
#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/kernels/pool_view.hpp"
#include "kvtier/kernels/staging.hpp"
#include "kvtier/protocol/error.hpp"

namespace kvtier::kernels {

enum class Backend : std::uint8_t { kCpu = 0, kCuda = 1 };

std::string_view backend_name(Backend backend) noexcept;

inline constexpr std::uint32_t kAllLayers = std::numeric_limits<std::uint32_t>::max();

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

  // Waits for this layer's prefetches issued so far.
  virtual Status wait(std::uint32_t layer) = 0;
  // Waits for every operation issued so far.
  virtual Status synchronize() = 0;

 protected:
  CopyExecutor() = default;
};

// True when the backend was compiled into this build (kCpu always).
bool backend_built(Backend backend) noexcept;

// A new executor of the given backend, not yet initialized. kUnavailable with the reason when
// the backend was not built (or cannot run here). The only place that knows whether CUDA was
// built.
Result<std::unique_ptr<CopyExecutor>> make_executor(Backend backend);

}  // namespace kvtier::kernels
