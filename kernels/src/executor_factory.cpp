// make_executor: the one place that knows which backends this build contains; also the checks of
// the int8 (T2) operations that every backend shares (executor.hpp).
// KVTIER_KERNELS_WITH_CUDA is a compile definition private to kvtier_kernels (0 or 1), set from
// KVTIER_WITH_CUDA in kernels/CMakeLists.txt.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cpu/cpu_executor.hpp"
#include "kvtier/kernels/executor.hpp"

#ifndef KVTIER_KERNELS_WITH_CUDA
#error "KVTIER_KERNELS_WITH_CUDA must be defined by kernels/CMakeLists.txt"
#endif
#if KVTIER_KERNELS_WITH_CUDA
#include "kvtier/kernels/cuda/cuda_executor.hpp"
#endif

namespace kvtier::kernels {
namespace {

Status invalid(const std::string& message) { return make_error(Errc::kInvalidArgument, message); }

std::string num(std::size_t value) { return std::to_string(value); }

}  // namespace

Status check_compatible(const KvLayout& layout, const Int8PoolDesc& int8) {
  const Int8Geometry& g = int8.geometry;
  if (auto s = validate(g); !s) return s;
  if (g.num_kv_heads != layout.num_kv_heads || g.head_dim != layout.head_dim ||
      g.dtype != layout.dtype || int8.num_layers != layout.num_layers) {
    return invalid("int8 pool: " + num(int8.num_layers) + " layers x " + num(g.num_kv_heads) +
                   " KV heads x " + num(g.head_dim) + " " + std::string(dtype_name(g.dtype)) +
                   " does not match the layout (" + num(layout.num_layers) + " x " +
                   num(layout.num_kv_heads) + " x " + num(layout.head_dim) + " " +
                   std::string(dtype_name(layout.dtype)) + ")");
  }
  if (int8.base == nullptr || reinterpret_cast<std::uintptr_t>(int8.base) % 16 != 0) {
    return invalid("int8 pool: base must be non-null and 16-byte aligned");
  }
  if (int8.blocks == 0 || std::uint64_t{int8.blocks} * g.group_tokens >= (std::uint64_t{1} << 31)) {
    return invalid("int8 pool: blocks must be >= 1 with fewer than 2^31 slots");
  }
  if (int8.layer_stride < std::size_t{int8.blocks} * g.block_bytes() || int8.layer_stride % 16 != 0) {
    return invalid("int8 pool: layer_stride " + num(int8.layer_stride) +
                   " must be a multiple of 16 and hold " + num(int8.blocks) + " blocks of " +
                   num(g.block_bytes()) + " bytes");
  }
  return {};
}

Status validate_mixed_staging(const PoolView& pool, const Int8PoolDesc& int8, std::uint32_t layer,
                              std::span<const std::uint32_t> slots,
                              std::span<const std::uint8_t> from_int8,
                              std::span<const std::uint32_t> positions, StagingOrder order,
                              const StagingBuffer& buffer) {
  if (from_int8.size() != slots.size()) {
    return invalid("prefetch: " + num(from_int8.size()) + " pool flags for " + num(slots.size()) +
                   " slots");
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const bool t2 = from_int8[i] != 0;
    const std::uint32_t limit = t2 ? int8.slots() : pool.slots;
    if (slots[i] >= limit) {
      return invalid("prefetch: slot " + num(i) + " is " + (t2 ? "int8" : "pool") + " slot " +
                     num(slots[i]) + " >= " + num(limit));
    }
  }
  // Every slot is in range of its own pool: validate_staging checks the rest.
  PoolView either = pool;
  either.slots = std::max(pool.slots, int8.slots());
  return validate_staging(either, layer, slots, positions, order, buffer);
}

Status validate_int8_restores(const KvLayout& layout, const Int8PoolDesc& int8,
                              std::span<const RowCopy> copies) {
  for (std::size_t i = 0; i < copies.size(); ++i) {
    if (copies[i].hbm_slot >= layout.num_slots || copies[i].pool_slot >= int8.slots()) {
      return invalid("int8 restore: copy " + num(i) + " hbm_slot " + num(copies[i].hbm_slot) +
                     " (num_slots " + num(layout.num_slots) + ") or int8 slot " +
                     num(copies[i].pool_slot) + " (int8 slots " + num(int8.slots()) +
                     ") out of range");
    }
  }
  std::vector<std::uint32_t> destinations;
  destinations.reserve(copies.size());
  for (const RowCopy& copy : copies) destinations.push_back(copy.hbm_slot);
  std::sort(destinations.begin(), destinations.end());
  if (auto dup = std::adjacent_find(destinations.begin(), destinations.end());
      dup != destinations.end()) {
    return invalid("int8 restore: destination hbm_slot " + num(*dup) + " appears more than once");
  }
  return {};
}

std::string_view backend_name(Backend backend) noexcept {
  switch (backend) {
    case Backend::kCpu:
      return "cpu";
    case Backend::kCuda:
      return "cuda";
  }
  return "unknown";
}

bool backend_built(Backend backend) noexcept {
  switch (backend) {
    case Backend::kCpu:
      return true;
    case Backend::kCuda:
      return KVTIER_KERNELS_WITH_CUDA != 0;
  }
  return false;
}

Result<std::unique_ptr<CopyExecutor>> make_executor(Backend backend) {
  switch (backend) {
    case Backend::kCpu:
      return std::unique_ptr<CopyExecutor>(std::make_unique<CpuExecutor>());
    case Backend::kCuda:
#if KVTIER_KERNELS_WITH_CUDA
      // kUnavailable "no CUDA device: <CUDA's reason>" when the build has CUDA but the machine
      // has no usable device (or driver).
      return cuda::make_cuda_executor();
#else
      return make_error(Errc::kUnavailable,
                        "make_executor: this kvtier was built without CUDA (KVTIER_CUDA=OFF or no "
                        "nvcc at configure time); rebuild with -DKVTIER_CUDA=ON or use "
                        "Backend::kCpu");
#endif
  }
  return make_error(Errc::kInvalidArgument, "make_executor: unknown backend");
}

}  // namespace kvtier::kernels
