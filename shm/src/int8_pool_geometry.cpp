#include "kvtier/shm/int8_pool_geometry.hpp"

#include <algorithm>
#include <string>

#include "kvtier/shm/pool_geometry.hpp"

namespace kvtier::shm {

Result<Int8PoolGeometry> make_int8_pool_geometry(std::uint32_t num_layers, std::uint32_t num_kv_heads,
                                                 std::uint32_t head_dim, std::uint32_t group_tokens,
                                                 std::uint32_t blocks) {
  struct Field {
    const char* name;
    std::uint32_t value;
    std::uint32_t max;
  };
  // slots = blocks * group_tokens must stay within the pool limit (group 0 is refused below).
  const std::uint32_t max_blocks = kMaxPoolSlots / std::max<std::uint32_t>(group_tokens, 1);
  for (const Field& field : {Field{"num_layers", num_layers, kMaxPoolLayers},
                             Field{"num_kv_heads", num_kv_heads, kMaxPoolKvHeads},
                             Field{"head_dim", head_dim, kMaxPoolHeadDim},
                             Field{"group_tokens", group_tokens, kMaxInt8GroupTokens},
                             Field{"blocks", blocks, max_blocks}}) {
    if (field.value == 0 || field.value > field.max) {
      return make_error(Errc::kInvalidArgument, std::string("int8 pool geometry ") + field.name + " " +
                                                    std::to_string(field.value) + " is outside [1, " +
                                                    std::to_string(field.max) + "]");
    }
  }
  const Int8PoolGeometry geometry{num_layers, num_kv_heads, head_dim, group_tokens, blocks};
  // Every factor is bounded above, but blocks * block_bytes * layers can still exceed the cap.
  std::uint64_t total = 0;
  if (__builtin_mul_overflow(geometry.block_bytes(), std::uint64_t{blocks}, &total) ||
      __builtin_mul_overflow(total, std::uint64_t{num_layers}, &total) || total > kMaxPoolBytes) {
    return make_error(Errc::kInvalidArgument, "int8 pool geometry of " + std::to_string(num_layers) + " layers x " +
                                                  std::to_string(blocks) + " blocks x " +
                                                  std::to_string(geometry.block_bytes()) + "-byte blocks exceeds " +
                                                  std::to_string(kMaxPoolBytes) + " bytes");
  }
  return geometry;
}

}  // namespace kvtier::shm
