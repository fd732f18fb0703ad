#include "kvtier/shm/pool_geometry.hpp"

#include "geometry_limits.hpp"

namespace kvtier::shm {

Result<PoolGeometry> make_pool_geometry(std::uint32_t num_layers, std::uint32_t num_kv_heads,
                                        std::uint32_t head_dim, std::uint32_t dtype_bytes,
                                        std::uint32_t slots) {
  if (auto ok = detail::check_fields("pool geometry", {{"num_layers", num_layers, kMaxPoolLayers},
                                                        {"num_kv_heads", num_kv_heads, kMaxPoolKvHeads},
                                                        {"head_dim", head_dim, kMaxPoolHeadDim},
                                                        {"dtype_bytes", dtype_bytes, kMaxPoolDtypeBytes},
                                                        {"slots", slots, kMaxPoolSlots}});
      !ok) {
    return tl::unexpected(ok.error());
  }
  const PoolGeometry geometry{num_layers, num_kv_heads, head_dim, dtype_bytes, slots};
  // Each factor is below 2^31 and the limits keep row_bytes below 2^39, but slots * row_bytes *
  // layers can overflow 64 bits; check the chain rather than reason about it.
  if (auto ok = detail::check_total("pool geometry", num_layers, slots, "slots", geometry.row_bytes(), "rows"); !ok) {
    return tl::unexpected(ok.error());
  }
  return geometry;
}

}  // namespace kvtier::shm
