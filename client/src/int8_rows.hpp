// Int8Rows: the client's read side of its int8 (T2) pool. The daemon is the pool's only writer:
// it quantizes a token's T1 rows into an int8 block before the plan that moves the token to T2,
// so by the time the client executes a T1 -> T2 move the bytes are there and the client only
// switches its reads. T2 rows are read by dequantizing them back to the model dtype, one native
// row (K of every KV head, then V: the T1 pool's row format) per token and layer; the executor
// does that (kernels::CopyExecutor::prefetch_mixed / restore_int8) over desc().
//
// Slot s of the pool is row s % G of block s / G in every layer (G = group_tokens; layout in
// shm/include/kvtier/shm/int8_pool_geometry.hpp, block format in kernels/.../quantize.hpp).
//
// Thread-safety: a plain value. Non-owning: the Client keeps the mapping alive for longer than
// every Int8Rows over it (and every executor bound to its desc()).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/kernels/executor.hpp"
#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/kernels/quantize.hpp"
#include "kvtier/base/error.hpp"
#include "kvtier/shm/int8_pool_segment.hpp"

namespace kvtier::client {

class Int8Rows {
 public:
  // kInvalidArgument when the pool was made for another model than `layout` describes (layers,
  // KV heads, head_dim) or the kernels reject the block geometry.
  static Result<Int8Rows> create(const shm::Int8PoolView& pool, const kernels::KvLayout& layout);

  std::uint32_t slots() const noexcept { return pool_.geometry().slots(); }
  std::uint32_t num_layers() const noexcept { return pool_.geometry().num_layers; }
  std::size_t row_bytes() const noexcept { return geometry_.row_bytes(); }

  // The pool as the kernels read it (bind_int8).
  kernels::Int8PoolDesc desc() const noexcept;

 private:
  Int8Rows(const shm::Int8PoolView& pool, const kernels::Int8Geometry& geometry) : pool_(pool), geometry_(geometry) {}

  shm::Int8PoolView pool_;
  kernels::Int8Geometry geometry_;
};

}  // namespace kvtier::client
