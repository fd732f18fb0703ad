// block_scores: kvtier_block_scores (the C ABI's engine helper) over torch / NumPy arrays (DLPack), for engine
// integrations whose attention kernel returns no probabilities (client/vllm). Bad shapes, dtypes
// or block ids raise kvtier.InvalidArgumentError, a non-CPU array TypeError (nanobind).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>

#include "bindings.hpp"
#include "kvtier/kvtier.h"
#include "py_client.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kvtier::python {
namespace {

using Query = nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;
using Keys = nb::ndarray<nb::ndim<4>, nb::device::cpu>;  // strided: a view of the engine's cache
using Table = nb::ndarray<const std::int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Lengths = nb::ndarray<const std::int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Out = nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

[[noreturn]] void invalid(const std::string& message) { throw StatusError(KVTIER_E_INVALID_ARGUMENT, message); }

kvtier_dtype key_type(const Keys& keys) {
  if (keys.dtype() == nb::dtype<float>()) return KVTIER_DTYPE_F32;
  if (keys.dtype() == nb::dlpack::dtype{static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1}) {
    return KVTIER_DTYPE_BF16;
  }
  if (keys.dtype() == nb::dlpack::dtype{static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}) {
    return KVTIER_DTYPE_F16;
  }
  invalid("block scores: keys must be float32, bfloat16 or float16");
}

void block_scores(const Query& query, const Keys& keys, const Table& block_table, const Lengths& seq_lens,
                  const Lengths& query_start, float scale, const Out& out) {
  if (keys.shape(3) != query.shape(2)) {
    invalid("block scores: keys [blocks, kv_heads, block_size, head_dim] need the queries' head_dim");
  }
  for (std::size_t i = 0; i < 4; ++i) {
    if (keys.stride(i) < 0 || (i == 3 && keys.stride(i) == 0)) invalid("block scores: negative or zero key strides");
  }
  const kvtier_paged_keys paged{keys.data(),
                                key_type(keys),
                                static_cast<std::uint32_t>(keys.shape(0)),
                                static_cast<std::uint32_t>(keys.shape(1)),
                                static_cast<std::uint32_t>(keys.shape(2)),
                                static_cast<std::uint32_t>(keys.shape(3)),
                                static_cast<std::size_t>(keys.stride(0)),
                                static_cast<std::size_t>(keys.stride(1)),
                                static_cast<std::size_t>(keys.stride(2)),
                                static_cast<std::size_t>(keys.stride(3))};
  if (block_table.shape(0) != seq_lens.shape(0) || out.shape(0) != seq_lens.shape(0)) {
    invalid("block scores: block_table, seq_lens and out disagree on rows");
  }
  if (query_start.shape(0) != seq_lens.shape(0) + 1) invalid("block scores: query_start needs rows + 1 entries");
  const kvtier_score_batch batch{query.data(),
                                 static_cast<std::uint32_t>(query.shape(0)),
                                 static_cast<std::uint32_t>(query.shape(1)),
                                 block_table.data(),
                                 static_cast<std::uint32_t>(block_table.shape(0)),
                                 static_cast<std::uint32_t>(block_table.shape(1)),
                                 seq_lens.data(),
                                 query_start.data(),
                                 scale};
  nb::gil_scoped_release release;
  if (kvtier_block_scores(&paged, &batch, out.data(), static_cast<std::uint32_t>(out.shape(1))) != KVTIER_OK) {
    invalid(kvtier_client_last_error(nullptr));
  }
}

}  // namespace

void bind_scores(nb::module_& m) {
  m.def("block_scores", &block_scores, "query"_a, "keys"_a, "block_table"_a, "seq_lens"_a, "query_start"_a,
        "scale"_a, "out"_a,
        "Per-block attention scores over a paged KV cache (kvtier_block_scores, kvtier/cache.h): "
        "for each row r, softmax(scale * q . k) of each of its queries (query[query_start[r]:query_start[r+1]], "
        "[tokens, q_heads, head_dim] float32; query j sees the keys up to position seq_lens[r] - queries + j) over "
        "the keys of its blocks block_table[r] (int32) in `keys` [blocks, kv_heads, block_size, head_dim] "
        "(float32, bfloat16 or float16, any strides: vLLM's CPU keys are a transposed view), averaged over query "
        "heads, summed over "
        "the row's queries and over each full block's keys into out[r, block] (float32 [rows, >= table width]; "
        "0 past the full blocks). InvalidArgumentError for shapes, lengths or block ids that disagree.");
}

}  // namespace kvtier::python
