// KvRowCopy and PoolRowGather (copy_ops.hpp): flat-indexed copy kernels over mapped host memory.
//
// Work is a flat index over vector_bytes-wide words, the innermost words of one head (or of one
// pool row) consecutive, so a warp's accesses are contiguous on both sides. Each thread issues
// kCopyUnroll independent loads before its stores: with host memory a microsecond or two away,
// the link fills only when hundreds of KiB are in flight.
#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda_check.hpp"
#include "fast_divmod.hpp"
#include "kvtier/kernels/cuda/copy_ops.hpp"

namespace kvtier::kernels::cuda {
namespace {

constexpr std::uint32_t kMaxGrid = 65535;

struct RowCopyWords {  // RowCopy as the device reads it
  std::uint32_t hbm_slot;
  std::uint32_t pool_slot;
};
static_assert(sizeof(RowCopyWords) == sizeof(RowCopy));
static_assert(sizeof(StagedRow) == 8);

struct KvRowCopyParams {
  const std::uintptr_t* k_bases;
  const std::uintptr_t* v_bases;
  const RowCopyWords* copies;
  std::uintptr_t pool;
  std::uint64_t token_stride, head_stride, block_stride, row_bytes, layer_stride, half;
  FastDivmod per_unit;   // words per (copy, layer) unit: 2 * heads * words per head
  FastDivmod per_head;   // words per head
  FastDivmod per_layer;  // copies per layer in this launch
  FastDivmod per_block;  // block_size
  std::uint32_t half_words;
  std::uint32_t first_layer;
  std::uint32_t items;
  bool offload;
};

struct GatherParams {
  const StagedRow* rows;
  std::uintptr_t layer_rows;  // pool row (layer, 0)
  std::uintptr_t staging;
  std::uint64_t row_bytes, half, staged_rows;
  FastDivmod per_row;  // words per pool row
  std::uint32_t half_words;
  std::uint32_t items;
};

template <class Word>
__device__ __forceinline__ void locate(const KvRowCopyParams& p, std::uint32_t index,
                                       const Word*& src, Word*& dst) {
  std::uint32_t word = 0;
  const std::uint32_t unit = p.per_unit.divmod(index, word);
  std::uint32_t c = 0;
  const std::uint32_t layer = p.first_layer + p.per_layer.divmod(unit, c);
  const RowCopyWords copy = p.copies[c];
  const std::uint32_t kv = word >= p.half_words ? 1u : 0u;
  word -= kv * p.half_words;
  std::uint32_t in_head = 0;
  const std::uint32_t head = p.per_head.divmod(word, in_head);
  std::uint32_t in_block = 0;
  const std::uint32_t block = p.per_block.divmod(copy.hbm_slot, in_block);
  const std::uintptr_t cache = (kv != 0 ? p.v_bases : p.k_bases)[layer] + block * p.block_stride +
                               in_block * p.token_stride + head * p.head_stride +
                               std::uint64_t{in_head} * sizeof(Word);
  const std::uintptr_t pooled = p.pool + layer * p.layer_stride + copy.pool_slot * p.row_bytes +
                                kv * p.half + std::uint64_t{word} * sizeof(Word);
  src = reinterpret_cast<const Word*>(p.offload ? cache : pooled);
  dst = reinterpret_cast<Word*>(p.offload ? pooled : cache);
}

template <class Word>
__device__ __forceinline__ void locate(const GatherParams& p, std::uint32_t index, const Word*& src,
                                       Word*& dst) {
  std::uint32_t word = 0;
  const StagedRow row = p.rows[p.per_row.divmod(index, word)];
  src = reinterpret_cast<const Word*>(p.layer_rows + row.slot * p.row_bytes +
                                      std::uint64_t{word} * sizeof(Word));
  const std::uint32_t kv = word >= p.half_words ? 1u : 0u;
  word -= kv * p.half_words;
  dst = reinterpret_cast<Word*>(p.staging + (kv * p.staged_rows + row.index) * p.half +
                                std::uint64_t{word} * sizeof(Word));
}

// Grid-stride over p.items words, kCopyUnroll loads in flight per thread.
template <class Word, class Params>
__global__ void __launch_bounds__(kCopyThreads) copy_words_kernel(const Params p) {
  const std::uint32_t step = gridDim.x * blockDim.x * kCopyUnroll;
  for (std::uint32_t base = blockIdx.x * blockDim.x * kCopyUnroll + threadIdx.x; base < p.items;
       base += step) {
    Word value[kCopyUnroll];
    Word* dst[kCopyUnroll];
#pragma unroll
    for (std::uint32_t u = 0; u < kCopyUnroll; ++u) {
      const std::uint32_t index = base + u * blockDim.x;
      dst[u] = nullptr;
      if (index < p.items) {
        const Word* src = nullptr;
        locate(p, index, src, dst[u]);
        value[u] = *src;
      }
    }
#pragma unroll
    for (std::uint32_t u = 0; u < kCopyUnroll; ++u) {
      if (dst[u] != nullptr) *dst[u] = value[u];
    }
  }
}

std::uint32_t grid_for(std::uint32_t items, std::uint32_t max_blocks) {
  const std::uint64_t per_block = std::uint64_t{kCopyThreads} * kCopyUnroll;
  const std::uint64_t needed = (items + per_block - 1) / per_block;
  return static_cast<std::uint32_t>(
      std::max<std::uint64_t>(1, std::min<std::uint64_t>({needed, max_blocks, kMaxGrid})));
}

template <class Params>
Status launch(const Params& p, std::uint32_t vector_bytes, std::uint32_t max_blocks,
              std::uintptr_t stream) {
  if (p.items == 0) return {};
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  const dim3 grid(grid_for(p.items, max_blocks));
  switch (vector_bytes) {
    case 16:
      copy_words_kernel<uint4><<<grid, kCopyThreads, 0, s>>>(p);
      break;
    case 8:
      copy_words_kernel<uint2><<<grid, kCopyThreads, 0, s>>>(p);
      break;
    case 4:
      copy_words_kernel<std::uint32_t><<<grid, kCopyThreads, 0, s>>>(p);
      break;
    case 2:
      copy_words_kernel<std::uint16_t><<<grid, kCopyThreads, 0, s>>>(p);
      break;
    default:
      copy_words_kernel<std::uint8_t><<<grid, kCopyThreads, 0, s>>>(p);
      break;
  }
  KVTIER_CUDA_CHECK_LAUNCH("copy_words_kernel");
  return {};
}

Status invalid(const std::string& what) { return make_error(Errc::kInvalidArgument, what); }

bool valid_width(std::uint32_t w) { return w == 1 || w == 2 || w == 4 || w == 8 || w == 16; }

}  // namespace

Status KvRowCopy::can_implement(const KvRowCopyArguments& a) {
  const std::string what = "kv row copy: ";
  if (!valid_width(a.vector_bytes)) return invalid(what + "vector_bytes must be 1, 2, 4, 8 or 16");
  if (a.max_blocks == 0) return invalid(what + "max_blocks is 0");
  if (a.num_copies == 0) return {};
  if (a.k_bases == 0 || a.v_bases == 0 || a.pool == 0 || a.copies == 0) {
    return invalid(what + "null address");
  }
  if (a.num_kv_heads == 0 || a.head_bytes == 0 || a.block_size == 0 || a.num_layers == 0) {
    return invalid(what + "zero size");
  }
  if (a.num_slots >= kFastDivmodLimit || a.block_size >= kFastDivmodLimit) {
    return invalid(what + "num_slots and block_size must be below 2^31");
  }
  if (a.row_bytes != 2 * a.num_kv_heads * a.head_bytes) {
    return invalid(what + "row_bytes != 2 * heads * head_bytes");
  }
  for (const std::size_t v : {a.head_bytes, a.token_stride, a.head_stride, a.block_stride,
                              a.row_bytes, a.layer_stride, std::size_t{a.pool}}) {
    if (v % a.vector_bytes != 0)
      return invalid(what + "an address or stride is not a multiple of vector_bytes");
  }
  if (a.row_bytes / a.vector_bytes >= kFastDivmodLimit) return invalid(what + "rows too long");
  return {};
}

Status KvRowCopy::initialize(const KvRowCopyArguments& args) {
  initialized_ = false;
  if (auto s = can_implement(args); !s) return s;
  args_ = args;
  initialized_ = true;
  return {};
}

Status KvRowCopy::run(std::uintptr_t stream) const {
  if (!initialized_) return make_error(Errc::kBadState, "kv row copy: not initialized");
  const KvRowCopyArguments& a = args_;
  if (a.num_copies == 0) return {};
  const auto words_per_head = static_cast<std::uint32_t>(a.head_bytes / a.vector_bytes);
  const auto words_per_unit = static_cast<std::uint32_t>(a.row_bytes / a.vector_bytes);
  KvRowCopyParams p{};
  p.k_bases = reinterpret_cast<const std::uintptr_t*>(a.k_bases);
  p.v_bases = reinterpret_cast<const std::uintptr_t*>(a.v_bases);
  p.pool = a.pool;
  p.token_stride = a.token_stride;
  p.head_stride = a.head_stride;
  p.block_stride = a.block_stride;
  p.row_bytes = a.row_bytes;
  p.layer_stride = a.layer_stride;
  p.half = a.row_bytes / 2;
  p.per_unit = FastDivmod(words_per_unit);
  p.per_head = FastDivmod(words_per_head);
  p.per_block = FastDivmod(a.block_size);
  p.half_words = words_per_unit / 2;
  p.offload = a.direction == Direction::kOffload;
  // Each launch covers copies [c0, c0 + n) of layers [l0, l0 + layers) with fewer than 2^31
  // words, so every index fits FastDivmod's range.
  const std::uint32_t max_units = (kFastDivmodLimit - 1) / words_per_unit;
  const std::uint32_t copies_per_launch = std::min(a.num_copies, max_units);
  const std::uint32_t layers_per_launch = std::max<std::uint32_t>(1, max_units / copies_per_launch);
  const auto* copies = reinterpret_cast<const RowCopyWords*>(a.copies);
  for (std::uint32_t c0 = 0; c0 < a.num_copies; c0 += copies_per_launch) {
    const std::uint32_t n = std::min(copies_per_launch, a.num_copies - c0);
    for (std::uint32_t l0 = 0; l0 < a.num_layers; l0 += layers_per_launch) {
      const std::uint32_t layers = std::min(layers_per_launch, a.num_layers - l0);
      p.copies = copies + c0;
      p.per_layer = FastDivmod(n);
      p.first_layer = a.first_layer + l0;
      p.items = n * layers * words_per_unit;
      if (auto s = launch(p, a.vector_bytes, a.max_blocks, stream); !s) return s;
    }
  }
  return {};
}

Status PoolRowGather::can_implement(const PoolRowGatherArguments& a) {
  const std::string what = "pool row gather: ";
  if (!valid_width(a.vector_bytes)) return invalid(what + "vector_bytes must be 1, 2, 4, 8 or 16");
  if (a.max_blocks == 0) return invalid(what + "max_blocks is 0");
  if (a.num_rows == 0) return {};
  if (a.pool == 0 || a.rows == 0 || a.staging == 0) return invalid(what + "null address");
  if (a.row_bytes == 0 || a.row_bytes % 2 != 0) return invalid(what + "row_bytes must be even");
  if (a.num_rows > a.staged_rows) return invalid(what + "num_rows > staged_rows");
  for (const std::size_t v :
       {a.row_bytes / 2, a.layer_stride, std::size_t{a.pool}, std::size_t{a.staging}}) {
    if (v % a.vector_bytes != 0)
      return invalid(what + "an address or stride is not a multiple of vector_bytes");
  }
  if (a.row_bytes / a.vector_bytes >= kFastDivmodLimit) return invalid(what + "rows too long");
  return {};
}

Status PoolRowGather::initialize(const PoolRowGatherArguments& args) {
  initialized_ = false;
  if (auto s = can_implement(args); !s) return s;
  args_ = args;
  initialized_ = true;
  return {};
}

Status PoolRowGather::run(std::uintptr_t stream) const {
  if (!initialized_) return make_error(Errc::kBadState, "pool row gather: not initialized");
  const PoolRowGatherArguments& a = args_;
  if (a.num_rows == 0) return {};
  const auto words_per_row = static_cast<std::uint32_t>(a.row_bytes / a.vector_bytes);
  GatherParams p{};
  p.layer_rows = a.pool + a.layer * a.layer_stride;
  p.staging = a.staging;
  p.row_bytes = a.row_bytes;
  p.half = a.row_bytes / 2;
  p.staged_rows = a.staged_rows;
  p.per_row = FastDivmod(words_per_row);
  p.half_words = words_per_row / 2;
  const std::uint32_t rows_per_launch = (kFastDivmodLimit - 1) / words_per_row;
  const auto* rows = reinterpret_cast<const StagedRow*>(a.rows);
  for (std::uint32_t r0 = 0; r0 < a.num_rows; r0 += rows_per_launch) {
    const std::uint32_t n = std::min(rows_per_launch, a.num_rows - r0);
    p.rows = rows + r0;
    p.items = n * words_per_row;
    if (auto s = launch(p, a.vector_bytes, a.max_blocks, stream); !s) return s;
  }
  return {};
}

}  // namespace kvtier::kernels::cuda
