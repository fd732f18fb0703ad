// int8 quantize (demotion to the T2 pool) and dequantize (staging T2 rows for attention) on the
// GPU, CUTLASS-style can_implement -> initialize -> run(stream). The format is the int8 block of
// kvtier/kernels/quantize.hpp (asymmetric min-max, u8 codes; keys per channel over a block of up
// to group_tokens rows, values per token and KV head), and the kernels reproduce its CPU
// reference (quantize_rows / dequantize_rows) bit for bit: every step is the same single IEEE
// f32 operation, explicitly rounded (__fsub_rn, __fmul_rn, __fdiv_rn, ...) so nvcc cannot fuse.
//
//  - Int8Quantize: `count` contiguous native rows (K then V, row_bytes each) -> blocks_bytes(count)
//    of blocks. Keys: one thread per (block, channel) walking the block's rows twice (range, then
//    codes); values: one warp per (row, KV head). Writes the same bytes as quantize_rows: key
//    parameters with their padding and each used row with its padding; rows past `count` in the
//    last block are left as they were.
//  - Int8Dequantize: `count` rows of blocks -> K and V halves at (k, k_stride) and (v, v_stride):
//    contiguous native rows (k = rows, v = rows + half, strides row_bytes) or the staging layout
//    of staging.hpp (k = staging, v = staging + count * half, strides half). One thread per (row,
//    channel); the blocks may sit in mapped pinned host memory (the T2 pool).
//  - Int8GatherDequantize: arbitrary int8 slots of a pool (blocks of group_tokens rows per layer,
//    slot s = row s % G of block s / G) -> output rows at arbitrary indices, for a range of
//    layers in one launch: staging a layer's T2 rows straight into their places in the staging
//    list, or restoring T2 rows of every layer into scratch. Same arithmetic as Int8Dequantize,
//    one thread per (layer, row, channel).
//
// Addresses are device-visible addresses as integers; `stream` is a cudaStream_t as an integer.
// Errors: kInvalidArgument from can_implement, kBadState from run before initialize,
// kUnavailable when a launch fails. Thread-safety: one thread at a time per object.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/kernels/cuda/copy_runs.hpp"
#include "kvtier/kernels/quantize.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::kernels::cuda {

struct Int8QuantizeArguments {
  Int8Geometry geometry;
  std::uintptr_t rows = 0;  // count native rows, row_bytes apart
  std::size_t count = 0;
  std::uintptr_t blocks = 0;  // geometry.blocks_bytes(count) bytes, 16-byte aligned
};

struct Int8DequantizeArguments {
  Int8Geometry geometry;
  std::uintptr_t blocks = 0;  // blocks holding `count` rows, 16-byte aligned
  std::size_t count = 0;
  std::uintptr_t k = 0;  // row i's K half goes to k + i * k_stride
  std::size_t k_stride = 0;
  std::uintptr_t v = 0;  // row i's V half goes to v + i * v_stride
  std::size_t v_stride = 0;
};

struct Int8GatherDequantizeArguments {
  Int8Geometry geometry;
  std::uintptr_t pool = 0;       // block 0 of layer first_layer, 16-byte aligned
  std::size_t layer_stride = 0;  // bytes between one layer's blocks and the next's (multiple of 16)
  std::uint32_t num_layers = 1;  // layers [0, num_layers) from `pool` on
  // Device array of num_rows StagedRow: int8 slot `slot` goes to output row `index`. The caller
  // keeps every slot inside the pool and the indices distinct (not checked on the device).
  std::uintptr_t rows = 0;
  std::uint32_t num_rows = 0;
  // Layer l, output row i: K half at k + l * out_layer_stride + i * k_stride, V half likewise.
  std::uintptr_t k = 0;
  std::size_t k_stride = 0;
  std::uintptr_t v = 0;
  std::size_t v_stride = 0;
  std::size_t out_layer_stride = 0;
};

class Int8Quantize {
 public:
  static Status can_implement(const Int8QuantizeArguments& args);
  Status initialize(const Int8QuantizeArguments& args);
  Status run(std::uintptr_t stream) const;

 private:
  Int8QuantizeArguments args_{};
  bool initialized_ = false;
};

class Int8Dequantize {
 public:
  static Status can_implement(const Int8DequantizeArguments& args);
  Status initialize(const Int8DequantizeArguments& args);
  Status run(std::uintptr_t stream) const;

 private:
  Int8DequantizeArguments args_{};
  bool initialized_ = false;
};

class Int8GatherDequantize {
 public:
  static Status can_implement(const Int8GatherDequantizeArguments& args);
  Status initialize(const Int8GatherDequantizeArguments& args);
  Status run(std::uintptr_t stream) const;

 private:
  Int8GatherDequantizeArguments args_{};
  bool initialized_ = false;
};

}  // namespace kvtier::kernels::cuda
