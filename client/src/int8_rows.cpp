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
  return Int8Rows(pool, geometry);
}

Status Int8Rows::dequantize(std::uint32_t layer, std::span<const std::uint32_t> slots,
                            std::span<std::byte* const> out) {
  if (layer >= num_layers() || slots.size() != out.size()) {
    return make_error(Errc::kInvalidArgument, "int8 rows: layer " + std::to_string(layer) + " or " +
                                                  std::to_string(slots.size()) + " slots for " +
                                                  std::to_string(out.size()) + " outputs out of range");
  }
  const std::uint32_t group = geometry_.group_tokens;
  for (std::size_t begin = 0; begin < slots.size();) {
    const std::uint32_t block = slots[begin] / group;
    std::size_t end = begin;
    which_.clear();
    for (; end < slots.size() && slots[end] / group == block; ++end) {
      if (slots[end] >= this->slots()) {
        return make_error(Errc::kInvalidArgument, "int8 rows: slot " + std::to_string(slots[end]) +
                                                      " >= " + std::to_string(this->slots()));
      }
      which_.push_back(slots[end] % group);
    }
    if (auto ok = kernels::dequantize_block(geometry_, pool_.block(layer, block), which_, out.subspan(begin, end - begin));
        !ok) {
      return ok;
    }
    begin = end;
  }
  return {};
}

}  // namespace kvtier::client
