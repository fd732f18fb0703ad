#include "kvtier/shm/int8_pool_geometry.hpp"

#include <algorithm>

#include "geometry_limits.hpp"

namespace kvtier::shm {

Result<Int8PoolGeometry> make_int8_pool_geometry(std::uint32_t num_layers, std::uint32_t num_kv_heads,
                                                 std::uint32_t head_dim, std::uint32_t group_tokens,
                                                 std::uint32_t blocks) {
  // slots = blocks * group_tokens must stay within the pool limit (group 0 is refused first).
  const std::uint32_t max_blocks = kMaxPoolSlots / std::max<std::uint32_t>(group_tokens, 1);
  if (auto ok = detail::check_fields("int8 pool geometry", {{"num_layers", num_layers, kMaxPoolLayers},
                                                             {"num_kv_heads", num_kv_heads, kMaxPoolKvHeads},
                                                             {"head_dim", head_dim, kMaxPoolHeadDim},
                                                             {"group_tokens", group_tokens, kMaxInt8GroupTokens},
                                                             {"blocks", blocks, max_blocks}});
      !ok) {
    return tl::unexpected(ok.error());
  }
  const Int8PoolGeometry geometry{num_layers, num_kv_heads, head_dim, group_tokens, blocks};
  if (auto ok = detail::check_total("int8 pool geometry", num_layers, blocks, "blocks", geometry.block_bytes(),
                                    "blocks");
      !ok) {
    return tl::unexpected(ok.error());
  }
  return geometry;
}

}  // namespace kvtier::shm
