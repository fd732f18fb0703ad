// PoolView validation and its compatibility with an engine's KvLayout.
#include "kvtier/kernels/pool_view.hpp"

#include <string>
#include <utility>

namespace kvtier::kernels {
namespace {

Status invalid(std::string message) {
  return make_error(Errc::kInvalidArgument, "pool view: " + std::move(message));
}

std::string num(std::size_t value) { return std::to_string(value); }

}  // namespace

Status validate(const PoolView& pool) {
  if (pool.base == nullptr) return invalid("base is null");
  if (pool.row_bytes == 0) return invalid("row_bytes is 0");
  if (pool.slots == 0) return invalid("slots is 0");
  if (pool.num_layers == 0) return invalid("num_layers is 0");
  const std::size_t layer_bytes = std::size_t{pool.slots} * pool.row_bytes;
  if (pool.num_layers > 1 && pool.layer_stride < layer_bytes) {
    return invalid("layer_stride " + num(pool.layer_stride) + " < slots * row_bytes " +
                   num(layer_bytes));
  }
  return {};
}

Status check_compatible(const KvLayout& layout, const PoolView& pool) {
  if (auto s = validate(layout); !s) return s;
  if (auto s = validate(pool); !s) return s;
  if (pool.row_bytes != layout.row_bytes()) {
    return invalid("row_bytes " + num(pool.row_bytes) + " != layout row bytes " +
                   num(layout.row_bytes()) + " (2 * " + num(layout.num_kv_heads) + " heads * " +
                   num(layout.head_dim) + " * " + std::string(dtype_name(layout.dtype)) + ")");
  }
  if (pool.num_layers != layout.num_layers) {
    return invalid("num_layers " + num(pool.num_layers) + " != layout num_layers " +
                   num(layout.num_layers));
  }
  return {};
}

}  // namespace kvtier::kernels
