// Row gather on the host: the CPU reference for staging scattered pool rows, usable on its own
// (e.g. to benchmark it against a plain memcpy loop over the same rows), and copy_rows, which
// assembles one layer's keys or values of a sequence in position order from a compact store and
// staged rows (kvtier.hf on the CPU: one pass per source where index_select + index_copy_ took
// two, and several times faster per row).
//
// Thread-safety: reentrant; callers keep concurrent calls' destinations disjoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/base/error.hpp"

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

// A [heads, rows, row_bytes] view of host memory, strides in bytes (a row's bytes contiguous).
struct HeadRows {
  std::byte* base = nullptr;  // not owned; const for a source
  std::size_t rows = 0;
  std::size_t token_stride = 0, head_stride = 0;
};

// For each i and head h < heads: copies `row_bytes` from row from[i] of head h of `src` to row
// to[i] of head h of `dst`. Runs of consecutive rows in both lists become one memcpy per head
// when both views store a head's rows densely (token_stride == row_bytes). kInvalidArgument,
// nothing copied, when from and to differ in length or an index is outside [0, rows) of its view.
// Preconditions: both views lie in memory the caller owns; dst's rows are disjoint from src's.
Status copy_rows(const HeadRows& dst, const HeadRows& src, std::size_t heads, std::size_t row_bytes,
                 std::span<const std::int64_t> from, std::span<const std::int64_t> to);

}  // namespace kvtier::kernels
