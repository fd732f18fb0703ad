// Int8Quantize and Int8Dequantize (int8_ops.hpp): the int8 block format of quantize.hpp on the
// GPU. Each arithmetic step mirrors cpu/quantize.cpp with an explicitly rounded intrinsic, so the
// bytes match quantize_rows / dequantize_rows exactly.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "cuda_check.hpp"
#include "kvtier/kernels/cuda/int8_ops.hpp"

namespace kvtier::kernels::cuda {
namespace {

constexpr std::uint32_t kThreads = 256;
constexpr std::uint32_t kMaxGrid = 65535;
constexpr float kLevels = 255.0f;

// Sizes and offsets of shm::Int8BlockShape (kvtier/shm/int8_block.hpp), copied to the device.
// key_min and value_min are indexed as floats after key_scale and value_scale (offsets 4 H D and
// 4 H there).
struct BlockShape {
  std::uint32_t heads, dim, channels, group;
  std::uint64_t count;             // rows
  std::uint64_t elem;              // dtype bytes
  std::uint64_t key_params;        // P
  std::uint64_t key_params_used;   // 8 H D: P's bytes before its padding
  std::uint64_t int8_row;          // bytes of one int8 row
  std::uint64_t block;             // bytes of one block
  std::uint64_t key_codes;         // 8 H: a row's key codes, from the row's start
  std::uint64_t value_codes;       // 8 H + H D: its value codes
  std::uint64_t used_row_bytes;    // 8 H + 2 H D: the row's bytes before its padding
};

BlockShape shape_of(const Int8Geometry& g, std::size_t count) {
  const shm::Int8BlockShape b = g.block_shape();
  return BlockShape{g.num_kv_heads,
                    g.head_dim,
                    static_cast<std::uint32_t>(b.channels()),
                    g.group_tokens,
                    count,
                    dtype_bytes(g.dtype),
                    b.key_params_bytes(),
                    b.key_params_used_bytes(),
                    b.int8_row_bytes(),
                    b.block_bytes(),
                    b.key_codes_offset(),
                    b.value_codes_offset(),
                    b.row_used_bytes()};
}

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(__half* p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

// cpu/quantize.cpp encode(): clamp((x - lo) * inv, 0, 255) + 0.5, truncated.
__device__ __forceinline__ std::uint8_t encode(float x, float lo, float inv) {
  float v = __fmul_rn(__fsub_rn(x, lo), inv);
  v = v > 0.0f ? v : 0.0f;
  v = v < kLevels ? v : kLevels;
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(__fadd_rn(v, 0.5f)));
}

__device__ __forceinline__ void scale_of(float lo, float hi, float& scale, float& inv) {
  const float range = __fsub_rn(hi, lo);
  scale = __fdiv_rn(range, kLevels);
  inv = range > 0.0f ? __fdiv_rn(kLevels, range) : 0.0f;
}

// Keys: one thread per (block, channel); also zeroes each block's key-parameter padding.
template <class T>
__global__ void quantize_keys_kernel(const std::byte* rows, std::uint64_t row_bytes,
                                     std::byte* blocks, BlockShape s) {
  const std::uint64_t num_blocks = (s.count + s.group - 1) / s.group;
  const std::uint64_t tasks = num_blocks * s.channels;
  for (std::uint64_t task = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; task < tasks;
       task += std::uint64_t{gridDim.x} * blockDim.x) {
    const std::uint64_t b = task / s.channels, c = task % s.channels;
    const std::uint64_t first = b * s.group, last = min(s.count, first + s.group);
    const auto at = [&](std::uint64_t r) {
      return load(reinterpret_cast<const T*>(rows + r * row_bytes) + c);
    };
    float lo = at(first), hi = lo;
    for (std::uint64_t r = first + 1; r < last; ++r) {
      const float x = at(r);
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
    float scale = 0.0f, inv = 0.0f;
    scale_of(lo, hi, scale, inv);
    std::byte* block = blocks + b * s.block;
    reinterpret_cast<float*>(block)[c] = scale;
    reinterpret_cast<float*>(block)[s.channels + c] = lo;
    std::byte* codes = block + s.key_params + s.key_codes + c;
    for (std::uint64_t r = first; r < last; ++r) {
      codes[(r - first) * s.int8_row] = static_cast<std::byte>(encode(at(r), lo, inv));
    }
    if (c == 0) {
      for (std::uint64_t p = s.key_params_used; p < s.key_params; ++p) {
        block[p] = std::byte{0};
      }
    }
  }
}

// Values: one warp per (row, KV head); the head-0 warp also zeroes the row's padding.
template <class T>
__global__ void quantize_values_kernel(const std::byte* rows, std::uint64_t row_bytes,
                                       std::byte* blocks, BlockShape s) {
  const unsigned lane = threadIdx.x % 32;
  const std::uint64_t warps = std::uint64_t{gridDim.x} * (blockDim.x / 32);
  const std::uint64_t tasks = s.count * s.heads;
  for (std::uint64_t task = std::uint64_t{blockIdx.x} * (blockDim.x / 32) + threadIdx.x / 32;
       task < tasks; task += warps) {
    const std::uint64_t t = task / s.heads, h = task % s.heads;
    const T* v = reinterpret_cast<const T*>(rows + t * row_bytes + s.channels * s.elem) + h * s.dim;
    float lo = load(v), hi = lo;
    for (std::uint32_t d = lane; d < s.dim; d += 32) {
      const float x = load(v + d);
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other_lo = __shfl_xor_sync(0xffffffffu, lo, offset);
      const float other_hi = __shfl_xor_sync(0xffffffffu, hi, offset);
      lo = other_lo < lo ? other_lo : lo;
      hi = other_hi > hi ? other_hi : hi;
    }
    float scale = 0.0f, inv = 0.0f;
    scale_of(lo, hi, scale, inv);
    std::byte* row = blocks + (t / s.group) * s.block + s.key_params + (t % s.group) * s.int8_row;
    if (lane == 0) {
      reinterpret_cast<float*>(row)[h] = scale;
      reinterpret_cast<float*>(row)[s.heads + h] = lo;
    }
    std::byte* codes = row + s.value_codes + h * s.dim;
    for (std::uint32_t d = lane; d < s.dim; d += 32) {
      codes[d] = static_cast<std::byte>(encode(load(v + d), lo, inv));
    }
    if (h == 0) {
      for (std::uint64_t p = s.used_row_bytes + lane; p < s.int8_row; p += 32)
        row[p] = std::byte{0};
    }
  }
}

// Channel c of int8 row `r` of `block`: x = min + code * scale, K and V, rounded to the dtype,
// written to element c of k_row and v_row.
template <class T>
__device__ __forceinline__ void dequantize_channel(const std::byte* block, std::uint64_t r,
                                                   std::uint64_t c, const BlockShape& s,
                                                   std::byte* k_row, std::byte* v_row) {
  const std::uint64_t h = c / s.dim;
  const std::byte* row = block + s.key_params + r * s.int8_row;
  const auto* params = reinterpret_cast<const float*>(block);
  const auto* row_params = reinterpret_cast<const float*>(row);
  const auto* codes = reinterpret_cast<const std::uint8_t*>(row + s.key_codes);
  const float key =
      __fadd_rn(params[s.channels + c], __fmul_rn(static_cast<float>(codes[c]), params[c]));
  const float value =
      __fadd_rn(row_params[s.heads + h],
                __fmul_rn(static_cast<float>(codes[s.channels + c]), row_params[h]));
  store(reinterpret_cast<T*>(k_row) + c, key);
  store(reinterpret_cast<T*>(v_row) + c, value);
}

// One thread per (row, channel) of `count` contiguous rows.
template <class T>
__global__ void dequantize_kernel(const std::byte* blocks, BlockShape s, std::byte* k,
                                  std::uint64_t k_stride, std::byte* v, std::uint64_t v_stride) {
  const std::uint64_t tasks = s.count * s.channels;
  for (std::uint64_t task = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; task < tasks;
       task += std::uint64_t{gridDim.x} * blockDim.x) {
    const std::uint64_t t = task / s.channels, c = task % s.channels;
    dequantize_channel<T>(blocks + (t / s.group) * s.block, t % s.group, c, s, k + t * k_stride,
                          v + t * v_stride);
  }
}

struct GatherShape {
  const std::byte* pool;
  std::uint64_t layer_stride;
  const StagedRow* rows;
  std::uint64_t num_rows, num_layers;
  std::byte* k;
  std::byte* v;
  std::uint64_t k_stride, v_stride, out_layer_stride;
};

// One thread per (layer, listed row, channel): int8 slot rows[r].slot -> output row rows[r].index.
template <class T>
__global__ void gather_dequantize_kernel(const GatherShape g, const BlockShape s) {
  const std::uint64_t per_layer = g.num_rows * s.channels;
  const std::uint64_t tasks = g.num_layers * per_layer;
  for (std::uint64_t task = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; task < tasks;
       task += std::uint64_t{gridDim.x} * blockDim.x) {
    const std::uint64_t l = task / per_layer, in_layer = task % per_layer;
    const std::uint64_t r = in_layer / s.channels, c = in_layer % s.channels;
    const StagedRow row = g.rows[r];
    const std::byte* block = g.pool + l * g.layer_stride + std::uint64_t{row.slot / s.group} * s.block;
    const std::uint64_t out = l * g.out_layer_stride;
    dequantize_channel<T>(block, row.slot % s.group, c, s, g.k + out + row.index * g.k_stride,
                          g.v + out + row.index * g.v_stride);
  }
}

std::uint32_t grid_for(std::uint64_t tasks, std::uint64_t per_block) {
  return static_cast<std::uint32_t>(
      std::clamp<std::uint64_t>((tasks + per_block - 1) / per_block, 1, kMaxGrid));
}

template <class T>
Status launch_quantize(const Int8QuantizeArguments& a, cudaStream_t stream) {
  const BlockShape s = shape_of(a.geometry, a.count);
  const auto* rows = reinterpret_cast<const std::byte*>(a.rows);
  auto* blocks = reinterpret_cast<std::byte*>(a.blocks);
  const std::uint64_t row_bytes = a.geometry.row_bytes();
  const std::uint64_t key_tasks = (s.count + s.group - 1) / s.group * s.channels;
  quantize_keys_kernel<T>
      <<<grid_for(key_tasks, kThreads), kThreads, 0, stream>>>(rows, row_bytes, blocks, s);
  KVTIER_CUDA_CHECK_LAUNCH("quantize_keys_kernel");
  quantize_values_kernel<T><<<grid_for(s.count * s.heads, kThreads / 32), kThreads, 0, stream>>>(
      rows, row_bytes, blocks, s);
  KVTIER_CUDA_CHECK_LAUNCH("quantize_values_kernel");
  return {};
}

template <class T>
Status launch_dequantize(const Int8DequantizeArguments& a, cudaStream_t stream) {
  const BlockShape s = shape_of(a.geometry, a.count);
  dequantize_kernel<T><<<grid_for(s.count * s.channels, kThreads), kThreads, 0, stream>>>(
      reinterpret_cast<const std::byte*>(a.blocks), s, reinterpret_cast<std::byte*>(a.k),
      a.k_stride, reinterpret_cast<std::byte*>(a.v), a.v_stride);
  KVTIER_CUDA_CHECK_LAUNCH("dequantize_kernel");
  return {};
}

template <class T>
Status launch_gather_dequantize(const Int8GatherDequantizeArguments& a, cudaStream_t stream) {
  const BlockShape s = shape_of(a.geometry, 0);
  const GatherShape g{reinterpret_cast<const std::byte*>(a.pool),
                      a.layer_stride,
                      reinterpret_cast<const StagedRow*>(a.rows),
                      a.num_rows,
                      a.num_layers,
                      reinterpret_cast<std::byte*>(a.k),
                      reinterpret_cast<std::byte*>(a.v),
                      a.k_stride,
                      a.v_stride,
                      a.out_layer_stride};
  const std::uint64_t tasks = std::uint64_t{a.num_layers} * a.num_rows * s.channels;
  gather_dequantize_kernel<T><<<grid_for(tasks, kThreads), kThreads, 0, stream>>>(g, s);
  KVTIER_CUDA_CHECK_LAUNCH("gather_dequantize_kernel");
  return {};
}

template <template <class> class Launch, class Args>
Status dispatch(const Args& a, std::uintptr_t stream) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  switch (a.geometry.dtype) {
    case KvDtype::kF32:
      return Launch<float>::run(a, s);
    case KvDtype::kF16:
      return Launch<__half>::run(a, s);
    case KvDtype::kBf16:
      return Launch<__nv_bfloat16>::run(a, s);
  }
  return make_error(Errc::kInvalidArgument, "int8: unknown dtype");
}

template <class T>
struct QuantizeLaunch {
  static Status run(const Int8QuantizeArguments& a, cudaStream_t s) {
    return launch_quantize<T>(a, s);
  }
};
template <class T>
struct DequantizeLaunch {
  static Status run(const Int8DequantizeArguments& a, cudaStream_t s) {
    return launch_dequantize<T>(a, s);
  }
};

template <class T>
struct GatherDequantizeLaunch {
  static Status run(const Int8GatherDequantizeArguments& a, cudaStream_t s) {
    return launch_gather_dequantize<T>(a, s);
  }
};

Status invalid(const char* what) { return make_error(Errc::kInvalidArgument, what); }

}  // namespace

Status Int8Quantize::can_implement(const Int8QuantizeArguments& a) {
  if (auto s = validate(a.geometry); !s) return s;
  if (a.count == 0) return {};
  if (a.rows == 0 || a.blocks == 0) return invalid("int8 quantize: null address");
  if (a.blocks % 16 != 0) return invalid("int8 quantize: blocks must be 16-byte aligned");
  if (a.rows % dtype_bytes(a.geometry.dtype) != 0) {
    return invalid("int8 quantize: rows not aligned to the element size");
  }
  return {};
}

Status Int8Quantize::initialize(const Int8QuantizeArguments& args) {
  initialized_ = false;
  if (auto s = can_implement(args); !s) return s;
  args_ = args;
  initialized_ = true;
  return {};
}

Status Int8Quantize::run(std::uintptr_t stream) const {
  if (!initialized_) return make_error(Errc::kBadState, "int8 quantize: not initialized");
  if (args_.count == 0) return {};
  return dispatch<QuantizeLaunch>(args_, stream);
}

Status Int8Dequantize::can_implement(const Int8DequantizeArguments& a) {
  if (auto s = validate(a.geometry); !s) return s;
  if (a.count == 0) return {};
  if (a.blocks == 0 || a.k == 0 || a.v == 0) return invalid("int8 dequantize: null address");
  if (a.blocks % 16 != 0) return invalid("int8 dequantize: blocks must be 16-byte aligned");
  const std::size_t es = dtype_bytes(a.geometry.dtype), half = a.geometry.channels() * es;
  if (a.count > 1 && (a.k_stride < half || a.v_stride < half)) {
    return invalid("int8 dequantize: output strides below one K/V half");
  }
  if (a.k % es != 0 || a.v % es != 0 || a.k_stride % es != 0 || a.v_stride % es != 0) {
    return invalid("int8 dequantize: outputs not aligned to the element size");
  }
  return {};
}

Status Int8Dequantize::initialize(const Int8DequantizeArguments& args) {
  initialized_ = false;
  if (auto s = can_implement(args); !s) return s;
  args_ = args;
  initialized_ = true;
  return {};
}

Status Int8Dequantize::run(std::uintptr_t stream) const {
  if (!initialized_) return make_error(Errc::kBadState, "int8 dequantize: not initialized");
  if (args_.count == 0) return {};
  return dispatch<DequantizeLaunch>(args_, stream);
}

Status Int8GatherDequantize::can_implement(const Int8GatherDequantizeArguments& a) {
  if (auto s = validate(a.geometry); !s) return s;
  if (a.num_rows == 0 || a.num_layers == 0) return {};
  if (a.pool == 0 || a.rows == 0 || a.k == 0 || a.v == 0) {
    return invalid("int8 gather dequantize: null address");
  }
  if (a.pool % 16 != 0 || (a.num_layers > 1 && a.layer_stride % 16 != 0)) {
    return invalid("int8 gather dequantize: blocks must be 16-byte aligned");
  }
  const std::size_t es = dtype_bytes(a.geometry.dtype), half = a.geometry.channels() * es;
  if (a.k_stride < half || a.v_stride < half) {
    return invalid("int8 gather dequantize: output strides below one K/V half");
  }
  if (a.k % es != 0 || a.v % es != 0 || a.k_stride % es != 0 || a.v_stride % es != 0 ||
      a.out_layer_stride % es != 0) {
    return invalid("int8 gather dequantize: outputs not aligned to the element size");
  }
  return {};
}

Status Int8GatherDequantize::initialize(const Int8GatherDequantizeArguments& args) {
  initialized_ = false;
  if (auto s = can_implement(args); !s) return s;
  args_ = args;
  initialized_ = true;
  return {};
}

Status Int8GatherDequantize::run(std::uintptr_t stream) const {
  if (!initialized_) return make_error(Errc::kBadState, "int8 gather dequantize: not initialized");
  if (args_.num_rows == 0 || args_.num_layers == 0) return {};
  return dispatch<GatherDequantizeLaunch>(args_, stream);
}

}  // namespace kvtier::kernels::cuda
