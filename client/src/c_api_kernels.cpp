// The C ABI's engine helpers (kvtier/cache.h, "engine helpers"): kernels::copy_rows and
// kernels::paged_block_scores over plain C views; a failure's detail is this thread's
// (kvtier_client_last_error(NULL)).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>

#include "kvtier/kernels/gather.hpp"
#include "kvtier/kernels/paged_scores.hpp"
#include "c_api_guard.hpp"
#include "kvtier/kvtier.h"

namespace {

using kvtier::client::thread_error;

kvtier_status invalid(std::string message) {
  thread_error() = std::move(message);
  return KVTIER_E_INVALID_ARGUMENT;
}

// Runs fn (returning a kvtier::Status) with nothing thrown out of it.
template <class Fn>
kvtier_status guarded(Fn&& fn) noexcept {
  try {
    thread_error().clear();
    const kvtier::Status done = fn();
    return done ? KVTIER_OK : invalid(done.error().message);
  } catch (const std::exception& e) {
    thread_error() = e.what();
    return KVTIER_E_INTERNAL;
  }
}

kvtier::kernels::HeadRows head_rows(const kvtier_head_rows& v) {
  return {static_cast<std::byte*>(v.base), v.rows, v.token_stride, v.head_stride};
}

bool key_type(kvtier_dtype dtype, kvtier::kernels::KeyType& out) {
  switch (dtype) {
    case KVTIER_DTYPE_F32: out = kvtier::kernels::KeyType::kF32; return true;
    case KVTIER_DTYPE_BF16: out = kvtier::kernels::KeyType::kBF16; return true;
    case KVTIER_DTYPE_F16: out = kvtier::kernels::KeyType::kF16; return true;
  }
  return false;
}

}  // namespace

kvtier_status kvtier_copy_rows(const kvtier_head_rows* dst, const kvtier_head_rows* src, size_t heads,
                               size_t row_bytes, const int64_t* from, const int64_t* to, size_t count) {
  if (dst == nullptr || src == nullptr) return invalid("copy_rows: dst or src is NULL");
  if (count != 0 && (from == nullptr || to == nullptr)) return invalid("copy_rows: from or to is NULL");
  return guarded([&] {
    return kvtier::kernels::copy_rows(head_rows(*dst), head_rows(*src), heads, row_bytes, {from, count},
                                      {to, count});
  });
}

kvtier_status kvtier_block_scores(const kvtier_paged_keys* keys, const kvtier_score_batch* batch, float* out,
                                  uint32_t out_stride) {
  if (keys == nullptr || batch == nullptr || out == nullptr) return invalid("block scores: keys, batch or out is NULL");
  kvtier::kernels::KeyType type{};
  if (!key_type(keys->dtype, type)) return invalid("block scores: keys must be float32, bfloat16 or float16");
  const std::size_t rows = batch->rows;
  if (rows != 0 && (batch->block_table == nullptr || batch->seq_lens == nullptr)) {
    return invalid("block scores: block_table or seq_lens is NULL");
  }
  if (batch->query_start == nullptr) return invalid("block scores: query_start is NULL");
  const kvtier::kernels::PagedKeys paged{keys->base,         type,          keys->num_blocks, keys->kv_heads,
                                         keys->block_size,   keys->head_dim, keys->block_stride, keys->head_stride,
                                         keys->token_stride, keys->dim_stride};
  const kvtier::kernels::ScoreBatch scores{batch->query,
                                           batch->tokens,
                                           batch->q_heads,
                                           {batch->block_table, rows * batch->table_stride},
                                           batch->table_stride,
                                           {batch->seq_lens, rows},
                                           {batch->query_start, rows + 1},
                                           batch->scale};
  return guarded([&] { return kvtier::kernels::paged_block_scores(paged, scores, {out, rows * out_stride}, out_stride); });
}
