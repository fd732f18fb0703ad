// CPU row gather: memcpy per row, runs of consecutive slots merged into one memcpy.
#include "kvtier/kernels/gather.hpp"

#include <cstring>
#include <string>

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

namespace {

// kInvalidArgument naming the first of `rows` outside [0, limit).
Status check_rows(std::span<const std::int64_t> rows, std::size_t limit, const char* what) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || static_cast<std::uint64_t>(rows[i]) >= limit) {
      return make_error(Errc::kInvalidArgument, std::string("copy_rows: ") + what + " row " +
                                                    std::to_string(rows[i]) + " at " + std::to_string(i) +
                                                    " is outside [0, " + std::to_string(limit) + ")");
    }
  }
  return {};
}

}  // namespace

Status copy_rows(const HeadRows& dst, const HeadRows& src, std::size_t heads, std::size_t row_bytes,
                 std::span<const std::int64_t> from, std::span<const std::int64_t> to) {
  if (from.size() != to.size()) {
    return make_error(Errc::kInvalidArgument, "copy_rows: " + std::to_string(from.size()) + " source rows for " +
                                                  std::to_string(to.size()) + " destinations");
  }
  if (auto ok = check_rows(from, src.rows, "source"); !ok) return ok;
  if (auto ok = check_rows(to, dst.rows, "destination"); !ok) return ok;
  const bool dense = src.token_stride == row_bytes && dst.token_stride == row_bytes;
  for (std::size_t h = 0; h < heads; ++h) {
    const std::byte* s = src.base + h * src.head_stride;
    std::byte* d = dst.base + h * dst.head_stride;
    std::size_t i = 0;
    while (i < from.size()) {
      std::size_t run = 1;
      if (dense) {
        while (i + run < from.size() && from[i + run] == from[i] + static_cast<std::int64_t>(run) &&
               to[i + run] == to[i] + static_cast<std::int64_t>(run)) {
          ++run;
        }
      }
      std::memcpy(d + static_cast<std::size_t>(to[i]) * dst.token_stride,
                  s + static_cast<std::size_t>(from[i]) * src.token_stride, run * row_bytes);
      i += run;
    }
  }
  return {};
}

}  // namespace kvtier::kernels
