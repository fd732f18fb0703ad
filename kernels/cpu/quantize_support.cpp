// Int8 tier support: geometry validation, the argument checks of the quantize / dequantize entry
// points (their loops: quantize.cpp) and error measurement (see quantize.hpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kvtier/kernels/quantize.hpp"
#include "quantize_blocks.hpp"
#include "quantize_loops.hpp"

namespace kvtier::kernels {
namespace {

constexpr std::uint32_t kMaxExtent = 16384;

Status bad(std::string_view what) {
  return make_error(Errc::kInvalidArgument, "int8 geometry: " + std::string(what));
}

Status check_rows(const Int8Geometry& g, std::size_t bytes, std::string_view what) {
  if (bytes % g.row_bytes() != 0) {
    return make_error(Errc::kInvalidArgument, std::string(what) + ": " + std::to_string(bytes) +
                                                  " bytes are not whole rows of " +
                                                  std::to_string(g.row_bytes()));
  }
  return {};
}

// Relative and absolute error of one head vector; adds to `e` (mean_rel holds the sum until the
// caller divides).
void accumulate(const float* x, const float* y, std::size_t n, QuantError& e) noexcept {
  double norm2 = 0.0;
  double err2 = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(y[i]) - static_cast<double>(x[i]);
    norm2 += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    err2 += d * d;
    e.max_abs = std::max(e.max_abs, std::fabs(d));
  }
  if (norm2 == 0.0) return;
  const double rel = std::sqrt(err2 / norm2);
  e.max_rel = std::max(e.max_rel, rel);
  e.mean_rel += rel;
  ++e.vectors;
}

Status check_block(const Int8Geometry& g, std::size_t block_size) {
  if (auto status = validate(g); !status) return status;
  if (block_size < g.block_bytes()) {
    return make_error(Errc::kInvalidArgument,
                      "int8 block: " + std::to_string(block_size) + " bytes, need " +
                          std::to_string(g.block_bytes()));
  }
  return {};
}

}  // namespace

Status validate(const Int8Geometry& g) {
  if (g.num_kv_heads == 0 || g.num_kv_heads > kMaxExtent) {
    return bad("num_kv_heads must be in [1, 16384], got " + std::to_string(g.num_kv_heads));
  }
  if (g.head_dim == 0 || g.head_dim > kMaxExtent) {
    return bad("head_dim must be in [1, 16384], got " + std::to_string(g.head_dim));
  }
  if (g.channels() > (std::size_t{1} << 24)) {
    return bad("num_kv_heads * head_dim must be <= 2^24, got " + std::to_string(g.channels()));
  }
  if (g.group_tokens == 0 || g.group_tokens > kMaxKeyGroup) {
    return bad("group_tokens must be in [1, 1024], got " + std::to_string(g.group_tokens));
  }
  if (dtype_bytes(g.dtype) == 0) {
    return bad("dtype has unknown value " + std::to_string(static_cast<unsigned>(g.dtype)));
  }
  return {};
}

Status quantize_block(const Int8Geometry& g, std::span<const std::byte* const> rows,
                      std::span<std::byte> block) {
  if (auto status = check_block(g, block.size()); !status) return status;
  if (rows.empty() || rows.size() > g.group_tokens) {
    return make_error(Errc::kInvalidArgument, "int8 block: " + std::to_string(rows.size()) +
                                                  " rows, need 1.." +
                                                  std::to_string(g.group_tokens));
  }
  detail::quantize_checked(g, rows, block.data(), detail::default_int8_loops());
  return {};
}

Status dequantize_block(const Int8Geometry& g, std::span<const std::byte> block,
                        std::span<const std::uint32_t> which, std::span<std::byte* const> out) {
  if (auto status = check_block(g, block.size()); !status) return status;
  if (which.size() != out.size()) {
    return make_error(Errc::kInvalidArgument, "int8 block: " + std::to_string(which.size()) +
                                                  " row indices for " +
                                                  std::to_string(out.size()) + " outputs");
  }
  for (std::uint32_t index : which) {
    if (index >= g.group_tokens) {
      return make_error(Errc::kInvalidArgument, "int8 block: row index " +
                                                    std::to_string(index) + " >= group_tokens " +
                                                    std::to_string(g.group_tokens));
    }
  }
  detail::dequantize_checked(g, block.data(), which, out, detail::default_int8_loops());
  return {};
}

Status quantize_rows(const Int8Geometry& g, std::span<const std::byte> src,
                     std::span<std::byte> dst) {
  if (auto status = validate(g); !status) return status;
  if (auto status = check_rows(g, src.size(), "quantize_rows"); !status) return status;
  const std::size_t count = src.size() / g.row_bytes();
  if (dst.size() != g.blocks_bytes(count)) {
    return make_error(Errc::kInvalidArgument,
                      "quantize_rows: destination has " + std::to_string(dst.size()) +
                          " bytes, need " + std::to_string(g.blocks_bytes(count)));
  }
  detail::quantize_rows_checked(g, src, dst.data(), detail::default_int8_loops());
  return {};
}

Status dequantize_rows(const Int8Geometry& g, std::span<const std::byte> blocks,
                       std::size_t count, std::span<std::byte> dst) {
  if (auto status = validate(g); !status) return status;
  if (blocks.size() != g.blocks_bytes(count) || dst.size() != count * g.row_bytes()) {
    return make_error(Errc::kInvalidArgument,
                      "dequantize_rows: " + std::to_string(count) + " rows need " +
                          std::to_string(g.blocks_bytes(count)) + " block bytes and " +
                          std::to_string(count * g.row_bytes()) + " output bytes, got " +
                          std::to_string(blocks.size()) + " and " + std::to_string(dst.size()));
  }
  detail::dequantize_rows_checked(g, blocks.data(), count, dst.data(),
                                  detail::default_int8_loops());
  return {};
}

Result<QuantErrorReport> measure_error(const Int8Geometry& g, std::span<const std::byte> original,
                                       std::span<const std::byte> restored) {
  if (auto status = validate(g); !status) return tl::unexpected(status.error());
  if (auto status = check_rows(g, original.size(), "measure_error"); !status) {
    return tl::unexpected(status.error());
  }
  if (restored.size() != original.size()) {
    return make_error(Errc::kInvalidArgument, "measure_error: original and restored sizes differ");
  }
  const std::size_t count = original.size() / g.row_bytes();
  const std::size_t channels = g.channels();
  const std::size_t dim = g.head_dim;
  std::vector<float> x(2 * channels), y(2 * channels);
  QuantErrorReport report;
  for (std::size_t r = 0; r < count; ++r) {
    to_f32(g.dtype, original.data() + r * g.row_bytes(), x.data(), 2 * channels);
    to_f32(g.dtype, restored.data() + r * g.row_bytes(), y.data(), 2 * channels);
    for (std::size_t h = 0; h < g.num_kv_heads; ++h) {
      accumulate(&x[h * dim], &y[h * dim], dim, report.keys);
      accumulate(&x[channels + h * dim], &y[channels + h * dim], dim, report.values);
    }
  }
  for (QuantError* e : {&report.keys, &report.values}) {
    if (e->vectors > 0) e->mean_rel /= static_cast<double>(e->vectors);
  }
  return report;
}

}  // namespace kvtier::kernels
