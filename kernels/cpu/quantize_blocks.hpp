// Private to the int8 tier: the block loops of quantize.cpp behind the checked public API of
// quantize.hpp (argument checks and errors: quantize_support.cpp). Preconditions, not checked
// here: validate(g) passed; spans and pointers are as large as the public functions require.
// Thread-safety: pure functions; concurrent calls must not share destinations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/kernels/quantize.hpp"

namespace kvtier::kernels::detail {

// quantize_block: rows.size() in 1..group_tokens; block holds block_bytes.
void quantize_checked(const Int8Geometry& g, std::span<const std::byte* const> rows,
                      std::byte* block);
// dequantize_block: every which[i] < group_tokens; which and out of equal size.
void dequantize_checked(const Int8Geometry& g, const std::byte* block,
                        std::span<const std::uint32_t> which, std::span<std::byte* const> out);
// quantize_rows: src whole rows; dst holds blocks_bytes(rows).
void quantize_rows_checked(const Int8Geometry& g, std::span<const std::byte> src, std::byte* dst);
// dequantize_rows: blocks of `count` rows; dst holds count rows.
void dequantize_rows_checked(const Int8Geometry& g, const std::byte* blocks, std::size_t count,
                             std::byte* dst);

}  // namespace kvtier::kernels::detail
