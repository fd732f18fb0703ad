#include "kvtier/shm/pool_geometry.hpp"

#include <string>

namespace kvtier::shm {

Result<PoolGeometry> make_pool_geometry(std::uint32_t num_layers, std::uint32_t num_kv_heads,
                                        std::uint32_t head_dim, std::uint32_t dtype_bytes,
                                        std::uint32_t slots) {
  struct Field {
    const char* name;
    std::uint32_t value;
    std::uint32_t max;
  };
  for (const Field& field : {Field{"num_layers", num_layers, kMaxPoolLayers},
                             Field{"num_kv_heads", num_kv_heads, kMaxPoolKvHeads},
                             Field{"head_dim", head_dim, kMaxPoolHeadDim},
                             Field{"dtype_bytes", dtype_bytes, kMaxPoolDtypeBytes},
                             Field{"slots", slots, kMaxPoolSlots}}) {
    if (field.value == 0 || field.value > field.max) {
      return make_error(Errc::kInvalidArgument,
                        std::string("pool geometry ") + field.name + " " +
                            std::to_string(field.value) + " is outside [1, " +
                            std::to_string(field.max) + "]");
    }
  }
  const PoolGeometry geometry{num_layers, num_kv_heads, head_dim, dtype_bytes, slots};
  // Each factor is below 2^31 and the limits keep row_bytes below 2^39, but slots * row_bytes *
  // layers can overflow 64 bits; check the chain rather than reason about it.
  std::uint64_t total = 0;
  if (__builtin_mul_overflow(geometry.row_bytes(), std::uint64_t{slots}, &total) ||
      __builtin_mul_overflow(total, std::uint64_t{num_layers}, &total) || total > kMaxPoolBytes) {
    return make_error(Errc::kInvalidArgument,
                      "pool geometry of " + std::to_string(num_layers) + " layers x " +
                          std::to_string(slots) + " slots x " +
                          std::to_string(geometry.row_bytes()) + "-byte rows exceeds " +
                          std::to_string(kMaxPoolBytes) + " bytes");
  }
  return geometry;
}

}  // namespace kvtier::shm
