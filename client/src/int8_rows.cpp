#include "int8_rows.hpp"

#include <string>

namespace kvtier::client {

Result<Int8Rows> Int8Rows::create(const shm::Int8PoolView& pool, const kernels::KvLayout& layout) {
  const shm::Int8PoolGeometry& g = pool.geometry();
  if (g.num_layers != layout.num_layers || g.num_kv_heads != layout.num_kv_heads || g.head_dim != layout.head_dim) {
    return make_error(Errc::kInvalidArgument,
                      "int8 pool of " + std::to_string(g.num_layers) + " layers x " + std::to_string(g.num_kv_heads) +
                          " KV heads x " + std::to_string(g.head_dim) + " does not match the cache layout (" +
                          std::to_string(layout.num_layers) + " x " + std::to_string(layout.num_kv_heads) + " x " +
                          std::to_string(layout.head_dim) + ")");
  }
  const kernels::Int8Geometry geometry{g.num_kv_heads, g.head_dim, layout.dtype, g.group_tokens};
  if (auto ok = kernels::validate(geometry); !ok) return tl::unexpected(ok.error());
  Int8Rows rows(pool, geometry);
  if (auto ok = kernels::check_compatible(layout, rows.desc()); !ok) return tl::unexpected(ok.error());
  return rows;
}

kernels::Int8PoolDesc Int8Rows::desc() const noexcept {
  const shm::Int8PoolGeometry& g = pool_.geometry();
  return kernels::Int8PoolDesc{pool_.rows().data(), geometry_, static_cast<std::size_t>(g.layer_stride()), g.blocks,
                               g.num_layers};
}

}  // namespace kvtier::client
