// CudaExecutor's int8 (T2) operations (cuda_executor.hpp): the pool registered once by
// bind_int8, mixed staging and T2 -> T0 restores through Int8GatherDequantize.
#include <algorithm>
#include <vector>

#include "cuda_executor_state.hpp"
#include "dma.hpp"
#include "kvtier/kernels/cuda/cuda_executor.hpp"
#include "kvtier/kernels/cuda/int8_ops.hpp"

namespace kvtier::kernels::cuda {

Status CudaExecutor::require_int8() const {
  if (auto s = require_initialized(); !s) return s;
  if (!state_->int8) return make_error(Errc::kBadState, "cuda executor: no int8 pool bound");
  return {};
}

Status CudaExecutor::bind_int8(const Int8PoolDesc& int8) {
  if (auto s = require_initialized(); !s) return s;
  State& st = *state_;
  if (st.int8) {
    // Queued work may still read the old pool or scratch: drain, then unregister.
    if (auto s = st.copy.synchronize(); !s) return s;
    st.int8.reset();
  }
  if (auto s = check_compatible(st.layout, int8); !s) return s;
  Int8Binding binding;
  binding.pool = int8;
  if (auto s = assign(HostRegistration::create(int8.base, int8.extent()), binding.registration); !s) {
    return s;
  }
  // Int8GatherDequantize reads f32 parameters and needs 16-byte aligned blocks; registration
  // keeps the offset inside the page, so this holds whenever the host base is aligned.
  if (binding.registration.device_address() % 16 != 0) {
    return make_error(Errc::kInvalidArgument, "cuda executor: int8 pool's device address is not 16-byte aligned");
  }
  for (UploadLane* lane : {&binding.t2_lanes[0], &binding.t2_lanes[1], &binding.restore_lane}) {
    if (auto s = assign(UploadLane::create(), *lane); !s) return s;
  }
  st.int8 = std::move(binding);  // from here until rebind or destruction the pages stay pinned
  return {};
}

Status CudaExecutor::prefetch_mixed(std::uint32_t layer, std::span<const std::uint32_t> slots,
                                    std::span<const std::uint8_t> from_int8,
                                    std::span<const std::uint32_t> positions, StagingOrder order,
                                    StagingBuffer& out) {
  if (auto s = require_int8(); !s) return s;
  State& st = *state_;
  Int8Binding& int8 = *st.int8;
  if (auto s = validate_mixed_staging(st.pool, int8.pool, layer, slots, from_int8, positions, order, out); !s) {
    return s;
  }
  const std::size_t rows = slots.size();
  const std::size_t half = st.pool.row_bytes / 2;
  out.describe(layer, rows, half, order, positions);
  st.stats = CopyStats{};
  if (rows == 0) return st.layer_ready[layer].record(st.copy.handle());
  // Each row goes to its own list index: T1 rows by copy, T2 rows dequantized.
  std::vector<StagedRow> t1, t2;
  for (std::size_t i = 0; i < rows; ++i) {
    (from_int8[i] != 0 ? t2 : t1).push_back(StagedRow{static_cast<std::uint32_t>(i), slots[i]});
  }
  if (auto s = order_after_compute(compute_stream_, st.compute_ready, st.copy); !s) return s;
  const cudaStream_t stream = as_stream(st.copy.handle());
  const StagingPlan plan = plan_staging(st.pool, layer, t1, rows, out.data, options_.dma_min_run_bytes);
  if (auto s = issue_staging(layer, plan, rows, out.data); !s) return s;
  if (!t2.empty()) {
    auto table = int8.t2_lanes[layer % 2].upload(t2.data(), t2.size() * sizeof(StagedRow), stream);
    if (!table) return tl::unexpected(table.error());
    Int8GatherDequantizeArguments args;
    args.geometry = int8.pool.geometry;
    args.pool = int8.registration.device_address() + std::size_t{layer} * int8.pool.layer_stride;
    args.layer_stride = int8.pool.layer_stride;
    args.num_layers = 1;
    args.rows = *table;
    args.num_rows = static_cast<std::uint32_t>(t2.size());
    args.k = out.data;  // staging.hpp: K of every row, then V of every row
    args.k_stride = half;
    args.v = out.data + rows * half;
    args.v_stride = half;
    Int8GatherDequantize op;
    if (auto s = op.initialize(args); !s) return s;
    if (auto s = op.run(st.copy.handle()); !s) return s;
    st.stats.int8_rows = t2.size();
  }
  return st.layer_ready[layer].record(st.copy.handle());
}

Status CudaExecutor::restore_int8(std::span<const RowCopy> copies) {
  if (auto s = require_int8(); !s) return s;
  State& st = *state_;
  Int8Binding& int8 = *st.int8;
  if (auto s = validate_int8_restores(st.layout, int8.pool, copies); !s) return s;
  st.stats = CopyStats{};
  if (copies.empty()) return {};
  const auto n = static_cast<std::uint32_t>(copies.size());
  const std::uint32_t layers = st.layout.num_layers;
  const std::size_t row_bytes = st.pool.row_bytes;
  // Scratch rows as a pool: layer l, row i = copy i's int8 row of layer l, dequantized.
  const PoolView scratch_view{nullptr, row_bytes, std::size_t{n} * row_bytes, n, layers};
  const std::size_t scratch_bytes = std::size_t{layers} * scratch_view.layer_stride;
  if (int8.restore_scratch.size() < scratch_bytes) {
    if (auto s = st.copy.synchronize(); !s) return s;  // earlier restores may still read it
    const std::size_t grown = std::max(scratch_bytes, 2 * int8.restore_scratch.size());
    int8.restore_scratch = DeviceBuffer{};
    if (auto s = assign(DeviceBuffer::allocate(grown), int8.restore_scratch);
        !s) {
      return s;
    }
  }
  std::vector<StagedRow> sources(n);
  std::vector<RowCopy> restores(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    sources[i] = StagedRow{i, copies[i].pool_slot};
    restores[i] = RowCopy{copies[i].hbm_slot, i};
  }
  if (auto s = order_after_compute(compute_stream_, st.compute_ready, st.copy); !s) return s;
  const cudaStream_t stream = as_stream(st.copy.handle());
  auto table = int8.restore_lane.upload(sources.data(), n * sizeof(StagedRow), stream);
  if (!table) return tl::unexpected(table.error());
  const std::uintptr_t scratch = int8.restore_scratch.address();
  Int8GatherDequantizeArguments args;
  args.geometry = int8.pool.geometry;
  args.pool = int8.registration.device_address();
  args.layer_stride = int8.pool.layer_stride;
  args.num_layers = layers;
  args.rows = *table;
  args.num_rows = n;
  args.k = scratch;
  args.k_stride = row_bytes;
  args.v = scratch + row_bytes / 2;
  args.v_stride = row_bytes;
  args.out_layer_stride = scratch_view.layer_stride;
  Int8GatherDequantize dequantize;
  if (auto s = dequantize.initialize(args); !s) return s;
  if (auto s = dequantize.run(st.copy.handle()); !s) return s;
  if (auto s = row_copy_kernel(Direction::kRestore, scratch, scratch_view, restores, 0, layers); !s) return s;
  st.stats.int8_rows = std::size_t{n} * layers;
  return finish_copies();
}

}  // namespace kvtier::kernels::cuda
