// CudaExecutor (cuda_executor.hpp): pinned pool, copy stream, per-layer events, planned copies.
#include "kvtier/kernels/cuda/cuda_executor.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cuda_check.hpp"
#include "cuda_executor_state.hpp"
#include "dma.hpp"
#include "fast_divmod.hpp"
#include "kvtier/kernels/cuda/device.hpp"

namespace kvtier::kernels::cuda {
namespace {

// Bytes from the pool's base to the end of its last row: what must be registered.
std::size_t pool_extent(const PoolView& pool) {
  return std::size_t{pool.num_layers - 1} * pool.layer_stride +
         std::size_t{pool.slots} * pool.row_bytes;
}

Status require_device_memory(const std::vector<std::uintptr_t>& bases, std::string_view which) {
  for (std::size_t l = 0; l < bases.size(); ++l) {
    cudaPointerAttributes attributes{};
    KVTIER_CUDA_CHECK(
        cudaPointerGetAttributes(&attributes, reinterpret_cast<const void*>(bases[l])));
    if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
      return make_error(Errc::kInvalidArgument, "cuda executor: " + std::string(which) + "[" +
                                                    num(l) + "] is not device memory");
    }
  }
  return {};
}

}  // namespace

CudaExecutor::CudaExecutor(CudaExecutorOptions options) : options_(options) {}

CudaExecutor::~CudaExecutor() = default;

Status CudaExecutor::can_implement(const KvLayout& layout, const PoolView& pool) const {
  if (auto n = device_count(); !n) return tl::unexpected(n.error());
  if (auto s = check_compatible(layout, pool); !s) return s;
  if (options_.copy_blocks == 0) {
    return make_error(Errc::kInvalidArgument, "cuda executor: copy_blocks is 0");
  }
  if (layout.num_slots >= kFastDivmodLimit || layout.block_size >= kFastDivmodLimit) {
    return make_error(Errc::kInvalidArgument, "cuda executor: num_slots must be below 2^31");
  }
  if (auto s = require_device_memory(layout.k_base, "k_base"); !s) return s;
  return require_device_memory(layout.v_base, "v_base");
}

Status CudaExecutor::initialize(const KvLayout& layout, const PoolView& pool) {
  state_.reset();  // unregisters the previous pool before this one may overlap it
  if (auto s = can_implement(layout, pool); !s) return s;
  auto state = std::make_unique<State>();
  state->layout = layout;
  state->pool = pool;
  if (auto s = assign(HostRegistration::create(pool.base, pool_extent(pool)), state->registration);
      !s) {
    return s;
  }
  const std::size_t table = std::size_t{layout.num_layers} * sizeof(std::uintptr_t);
  if (auto s = assign(DeviceBuffer::allocate(2 * table), state->bases); !s) return s;
  if (auto s = state->bases.upload(layout.k_base.data(), table); !s) return s;
  if (auto s = state->bases.upload(layout.v_base.data(), table, table); !s) return s;
  if (auto s = assign(Stream::create(), state->copy); !s) return s;
  if (auto s = assign(Event::create(), state->compute_ready); !s) return s;
  if (auto s = assign(Event::create(), state->copies_done); !s) return s;
  state->layer_ready.resize(layout.num_layers);
  for (Event& event : state->layer_ready) {
    if (auto s = assign(Event::create(), event); !s) return s;
  }
  for (UploadLane* lane : {&state->copy_lane, &state->stage_lanes[0], &state->stage_lanes[1]}) {
    if (auto s = assign(UploadLane::create(), *lane); !s) return s;
  }
  const std::uint32_t width =
      common_vector_bytes({layout.head_bytes(), layout.token_stride, layout.head_stride,
                           layout.block_stride, pool.row_bytes, pool.layer_stride,
                           static_cast<std::size_t>(state->registration.device_address())});
  state->row_copy_vector =
      common_vector_bytes(layout.v_base, common_vector_bytes(layout.k_base, width));
  state_ = std::move(state);
  return {};
}

Status CudaExecutor::require_initialized() const {
  if (!state_) return make_error(Errc::kBadState, "cuda executor: not initialized");
  return {};
}

void CudaExecutor::set_compute_stream(std::uintptr_t stream) noexcept { compute_stream_ = stream; }

std::uintptr_t CudaExecutor::copy_stream() const noexcept {
  return state_ ? state_->copy.handle() : 0;
}

CopyStats CudaExecutor::last_stats() const noexcept { return state_ ? state_->stats : CopyStats{}; }

Status CudaExecutor::copy_layers(Direction direction, std::span<const RowCopy> copies,
                                 std::uint32_t first_layer, std::uint32_t count) {
  if (auto s = require_initialized(); !s) return s;
  State& st = *state_;
  const std::uint32_t layers = st.layout.num_layers;
  const std::string what(direction_name(direction));
  if (first_layer >= layers) {
    return make_error(Errc::kInvalidArgument,
                      what + ": first layer " + num(first_layer) + " >= num_layers " + num(layers));
  }
  const std::uint32_t available = layers - first_layer;
  if (count != kAllLayers && count > available) {
    return make_error(Errc::kInvalidArgument, what + ": layers " + num(first_layer) + "+" +
                                                  num(count) + " exceed num_layers " + num(layers));
  }
  if (auto s = validate_copies(st.layout, st.pool, direction, copies); !s) return s;
  const std::uint32_t end = first_layer + (count == kAllLayers ? available : count);
  st.stats = CopyStats{};
  if (copies.empty()) return {};
  if (auto s = order_after_compute(compute_stream_, st.compute_ready, st.copy); !s) return s;
  const cudaStream_t stream = as_stream(st.copy.handle());
  const CopyPlan plan = plan_copies(st.layout, st.pool, direction, copies, first_layer, end,
                                    options_.dma_min_run_bytes);
  for (const DmaCopy& c : plan.dma) st.stats.dma_bytes += c.bytes;
  st.stats.dma_copies = plan.dma.size();
  if (auto s = issue_dma(plan.dma, stream); !s) return s;
  if (!plan.kernel_copies.empty()) {
    if (auto s = row_copy_kernel(direction, st.registration.device_address(), st.pool,
                                 plan.kernel_copies, first_layer, end);
        !s) {
      return s;
    }
  }
  return finish_copies();
}

Status CudaExecutor::row_copy_kernel(Direction direction, std::uintptr_t pool,
                                     const PoolView& view, std::span<const RowCopy> copies,
                                     std::uint32_t first_layer, std::uint32_t end_layer) {
  State& st = *state_;
  const std::uint32_t layers = st.layout.num_layers;
  const std::size_t n = copies.size();
  const cudaStream_t stream = as_stream(st.copy.handle());
  auto table = st.copy_lane.upload(copies.data(), n * sizeof(RowCopy), stream);
  if (!table) return tl::unexpected(table.error());
  KvRowCopyArguments args;
  args.direction = direction;
  args.k_bases = st.bases.address();
  args.v_bases = st.bases.address() + std::size_t{layers} * sizeof(std::uintptr_t);
  args.num_kv_heads = st.layout.num_kv_heads;
  args.num_slots = st.layout.num_slots;
  args.block_size = st.layout.block_size;
  args.head_bytes = st.layout.head_bytes();
  args.token_stride = st.layout.token_stride;
  args.head_stride = st.layout.head_stride;
  args.block_stride = st.layout.block_stride;
  args.pool = pool;
  args.row_bytes = view.row_bytes;
  args.layer_stride = view.layer_stride;
  args.copies = *table;
  args.num_copies = static_cast<std::uint32_t>(n);
  args.first_layer = first_layer;
  args.num_layers = end_layer - first_layer;
  // st.row_copy_vector covers the layout and the T1 pool; other rows (T2 scratch) narrow it.
  args.vector_bytes =
      std::min(st.row_copy_vector,
               common_vector_bytes({view.row_bytes, view.layer_stride, std::size_t{pool}}));
  args.max_blocks = options_.copy_blocks;
  KvRowCopy op;
  if (auto s = op.initialize(args); !s) return s;
  if (auto s = op.run(st.copy.handle()); !s) return s;
  st.stats.kernel_units = n * args.num_layers;
  st.stats.kernel_bytes = st.stats.kernel_units * view.row_bytes;
  return {};
}

Status CudaExecutor::finish_copies() {
  State& st = *state_;
  if (auto s = st.copies_done.record(st.copy.handle()); !s) return s;
  if (compute_stream_ != 0) {
    KVTIER_CUDA_CHECK(cudaStreamWaitEvent(as_stream(compute_stream_), as_event(st.copies_done), 0));
  }
  return {};
}

Status CudaExecutor::prefetch(std::uint32_t layer, std::span<const std::uint32_t> pool_slots,
                              std::span<const std::uint32_t> positions, StagingOrder order,
                              StagingBuffer& out) {
  if (auto s = require_initialized(); !s) return s;
  State& st = *state_;
  if (auto s = validate_staging(st.pool, layer, pool_slots, positions, order, out); !s) return s;
  const std::size_t rows = pool_slots.size();
  const std::size_t half = st.pool.row_bytes / 2;
  out.describe(layer, rows, half, order, positions);
  st.stats = CopyStats{};
  if (rows != 0) {
    if (auto s = order_after_compute(compute_stream_, st.compute_ready, st.copy); !s) return s;
    const StagingPlan plan = plan_staging(st.pool, layer, pool_slots, out.data, options_.dma_min_run_bytes);
    if (auto s = issue_staging(layer, plan, rows, out.data); !s) return s;
  }
  return st.layer_ready[layer].record(st.copy.handle());
}

Status CudaExecutor::issue_staging(std::uint32_t layer, const StagingPlan& plan, std::size_t rows,
                                   std::uintptr_t staging) {
  State& st = *state_;
  const cudaStream_t stream = as_stream(st.copy.handle());
  for (const DmaCopy2d& c : plan.dma) st.stats.dma_bytes += c.width * c.height;
  st.stats.dma_copies = plan.dma.size();
  if (auto s = issue_dma(plan.dma, stream); !s) return s;
  if (plan.kernel_rows.empty()) return {};
  const std::size_t n = plan.kernel_rows.size();
  auto table = st.stage_lanes[layer % 2].upload(plan.kernel_rows.data(), n * sizeof(StagedRow), stream);
  if (!table) return tl::unexpected(table.error());
  PoolRowGatherArguments args;
  args.pool = st.registration.device_address();
  args.row_bytes = st.pool.row_bytes;
  args.layer_stride = st.pool.layer_stride;
  args.layer = layer;
  args.rows = *table;
  args.num_rows = static_cast<std::uint32_t>(n);
  args.staged_rows = static_cast<std::uint32_t>(rows);
  args.staging = staging;
  args.vector_bytes = common_vector_bytes({st.pool.row_bytes / 2, st.pool.layer_stride,
                                           static_cast<std::size_t>(args.pool), static_cast<std::size_t>(staging)});
  args.max_blocks = options_.copy_blocks;
  PoolRowGather op;
  if (auto s = op.initialize(args); !s) return s;
  if (auto s = op.run(st.copy.handle()); !s) return s;
  st.stats.kernel_units = n;
  st.stats.kernel_bytes = n * st.pool.row_bytes;
  return {};
}

Status CudaExecutor::wait(std::uint32_t layer) {
  if (auto s = require_initialized(); !s) return s;
  if (layer >= state_->layout.num_layers) {
    return make_error(Errc::kInvalidArgument, "wait: layer " + num(layer) + " >= num_layers " +
                                                  num(state_->layout.num_layers));
  }
  const Event& ready = state_->layer_ready[layer];
  if (compute_stream_ != 0) {
    KVTIER_CUDA_CHECK(cudaStreamWaitEvent(as_stream(compute_stream_), as_event(ready), 0));
    return {};
  }
  return ready.synchronize();
}

Status CudaExecutor::synchronize() {
  if (auto s = require_initialized(); !s) return s;
  return state_->copy.synchronize();
}

Status CudaExecutor::reserve_staging(std::size_t rows_per_layer) {
  if (auto s = require_initialized(); !s) return s;
  State& st = *state_;
  if (auto s = st.copy.synchronize(); !s) return s;  // old buffers may still be filled
  const std::size_t bytes = staging_bytes(st.pool, rows_per_layer);
  st.staging_bytes = 0;
  for (DeviceBuffer& buffer : st.staging) {
    buffer = DeviceBuffer{};
    auto made = DeviceBuffer::allocate(bytes);
    if (!made) return tl::unexpected(made.error());
    buffer = std::move(*made);
  }
  st.staging_bytes = bytes;
  return {};
}

Result<StagingBuffer> CudaExecutor::staging_for(std::uint32_t layer) const {
  if (auto s = require_initialized(); !s) return tl::unexpected(s.error());
  if (state_->staging_bytes == 0) {
    return make_error(Errc::kBadState, "cuda executor: no staging reserved");
  }
  StagingBuffer buffer;
  buffer.data = state_->staging[layer % 2].address();
  buffer.capacity_bytes = state_->staging_bytes;
  return buffer;
}

Result<std::unique_ptr<CopyExecutor>> make_cuda_executor(CudaExecutorOptions options) {
  if (auto n = device_count(); !n) return tl::unexpected(n.error());
  return std::unique_ptr<CopyExecutor>(std::make_unique<CudaExecutor>(options));
}

}  // namespace kvtier::kernels::cuda
