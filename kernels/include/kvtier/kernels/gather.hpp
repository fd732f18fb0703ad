// Row gather on the host: the CPU reference for staging scattered pool rows, usable on its own
// (e.g. to benchmark it against a plain memcpy loop over the same rows).
//
// Thread-safety: reentrant; callers keep concurrent calls' destinations disjoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvtier::kernels {

// For each i: copies `bytes` from src_base + slots[i] * src_stride to dst + i * dst_stride.
// Consecutive slots (slots[i+1] == slots[i] + 1) become one memcpy when bytes equals both
// strides. Preconditions: every source and destination in bounds, destination disjoint from the
// sources.
void gather_rows(std::byte* dst, std::size_t dst_stride, const std::byte* src_base,
                 std::size_t src_stride, std::size_t bytes,
                 std::span<const std::uint32_t> slots) noexcept;

// Whole rows packed densely: dst row i = source row slots[i], rows of row_bytes.
void gather_rows(std::byte* dst, const std::byte* src_base, std::size_t row_bytes,
                 std::span<const std::uint32_t> slots) noexcept;

}  // namespace kvtier::kernels
