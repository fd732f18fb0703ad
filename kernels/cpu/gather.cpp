// CPU row gather: memcpy per row, runs of consecutive slots merged into one memcpy.
#include "kvtier/kernels/gather.hpp"

#include <cstring>

namespace kvtier::kernels {

void gather_rows(std::byte* dst, std::size_t dst_stride, const std::byte* src_base,
                 std::size_t src_stride, std::size_t bytes,
                 std::span<const std::uint32_t> slots) noexcept {
  const bool dense = bytes == src_stride && bytes == dst_stride;
  std::size_t i = 0;
  while (i < slots.size()) {
    std::size_t run = 1;
    if (dense) {
      while (i + run < slots.size() && slots[i + run] == slots[i] + run) ++run;
    }
    std::memcpy(dst + i * dst_stride, src_base + std::size_t{slots[i]} * src_stride, run * bytes);
    i += run;
  }
}

void gather_rows(std::byte* dst, const std::byte* src_base, std::size_t row_bytes,
                 std::span<const std::uint32_t> slots) noexcept {
  gather_rows(dst, row_bytes, src_base, row_bytes, row_bytes, slots);
}

}  // namespace kvtier::kernels
