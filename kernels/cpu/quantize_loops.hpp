// Private to the int8 tier: the table of inner loops that the block code of quantize.cpp runs,
// one table per instruction set (scalar: quantize_scalar.cpp; AVX2 and AVX-512:
// quantize_avx2.cpp, quantize_avx512.cpp), and the dispatch that picks one (quantize_dispatch.cpp).
//
// Why a table: the speed of the int8 tier must not depend on the optimisation level (the -O2
// build that packages ship vectorizes far less than -O3), so the hot loops are written with
// explicit SIMD, and the instruction set is chosen at run time from the CPU. The choice is made
// once per process, on first use (a function-local static: thread-safe, and safe under
// ThreadSanitizer, unlike an ifunc resolver, which runs before the TSan runtime is set up); each
// entry point then reads it once per call and hands the table down, never per row.
//
// Contract of every table: the bytes written are exactly those of the scalar table (the
// definition documented at the top of quantize_scalar.cpp) for every input, NaN, ±inf, ±0 and
// subnormals included, and for every length (tails included). The SIMD files are compiled with
// -ffp-contract=off so that no a·b + c is fused.
//
// Thread-safety: the tables are immutable; the loops are pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/kernels/quantize.hpp"

namespace kvtier::kernels::detail {

// The loops of one dtype. Pointers: src rows of that dtype, never overlapping the destinations.
struct Int8DtypeLoops {
  // dst[i] = element i of src as f32, i < n (exact).
  void (*to_f32)(const std::byte* src, float* dst, std::size_t n) noexcept;
  // Element i of dst = src[i] rounded to the dtype (nearest even; NaN stays NaN), i < n.
  void (*from_f32)(const float* src, std::byte* dst, std::size_t n) noexcept;
  // For i < n: lo[i] = min(lo[i], v), hi[i] = max(hi[i], v) (selects `v < lo ? v : lo`) for v =
  // element i of rows[0], ..., rows[k − 1] in that order; k in 1..kWidenRows.
  void (*widen)(const std::byte* const* rows, std::size_t k, std::size_t n, float* lo,
                float* hi) noexcept;
  // The values of one row (src: heads·dim elements) into its int8 row: per head value_scale,
  // value_min and codes at the offsets of `shape`. x: heads·dim floats of scratch.
  void (*quantize_values)(const std::byte* src, const shm::Int8BlockShape& shape, float* x,
                          std::byte* row) noexcept;
  // codes[i] = encode(element i of src, lo[i], inv[i]), i < n. in_range: every inv is finite
  // and lo/inv are the channel parameters of the rows being encoded (then the clamps of encode
  // provably never bite and are skipped).
  void (*encode_keys)(const std::byte* src, const float* lo, const float* inv, bool in_range,
                      std::uint8_t* codes, std::size_t n) noexcept;
  // Element i of out = lo[i] + codes[i]·scale[i] in the dtype, i < n. finite: every lo and scale
  // is finite (then no result is NaN and the NaN select of the rounding is skipped).
  void (*decode_keys)(const std::uint8_t* codes, const float* lo, const float* scale, bool finite,
                      std::byte* out, std::size_t n) noexcept;
  // Head h of out (dim elements at h·dim) = min[h] + codes[h·dim + d]·scale[h], h < heads.
  void (*decode_values)(const std::uint8_t* codes, const float* min, const float* scale,
                        std::size_t heads, std::size_t dim, std::byte* out) noexcept;
};

struct Int8Loops {
  Int8Isa isa;
  // scale[i] = (hi[i] − lo[i]) / 255, inv[i] = range > 0 ? 255 / range : 0, i < n; returns
  // whether every inv is finite.
  bool (*key_params)(const float* lo, const float* hi, float* scale, float* inv,
                     std::size_t n) noexcept;
  // Whether x[0..n) are all finite.
  bool (*all_finite)(const float* x, std::size_t n) noexcept;
  Int8DtypeLoops f16;
  Int8DtypeLoops bf16;
  Int8DtypeLoops f32;

  const Int8DtypeLoops& of(KvDtype dtype) const noexcept {
    return dtype == KvDtype::kF16 ? f16 : dtype == KvDtype::kBf16 ? bf16 : f32;
  }
};

inline constexpr std::size_t kWidenRows = 4;  // rows per key-range pass

// The tables. scalar_int8_loops() always exists; the others return nullptr when this build has
// no such code (not x86-64) or this CPU (or its OS) cannot run it.
const Int8Loops& scalar_int8_loops() noexcept;
const Int8Loops* avx2_int8_loops() noexcept;
const Int8Loops* avx512_int8_loops() noexcept;

// The table for `isa`, nullptr when unavailable (as above).
const Int8Loops* int8_loops_for(Int8Isa isa) noexcept;
// The widest available table, chosen on first call and fixed for the process.
const Int8Loops& default_int8_loops() noexcept;

}  // namespace kvtier::kernels::detail
