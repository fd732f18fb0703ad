#include "kvtier/shm/int8_pool_segment.hpp"

#include <string>

#include "kvtier/base/check.hpp"
#include "pool_block.hpp"

namespace kvtier::shm {

Result<Segment> create_int8_pool_segment(std::string name, const Int8PoolGeometry& geometry,
                                         std::uint64_t epoch, std::uint32_t client_id, SegmentOwner owner) {
  KVTIER_CHECK(geometry.total_bytes() <= kMaxPoolBytes, "int8 pool geometry beyond kMaxPoolBytes");
  return detail::create_block_segment<Int8PoolBlock>(std::move(name), SegmentKind::kInt8Pool, geometry,
                                                     int8_pool_payload_bytes(geometry), epoch, client_id, owner);
}

Result<Int8PoolView> Int8PoolView::validate(std::span<std::byte> segment) {
  auto checked = detail::validate_block<Int8PoolBlock>(segment, "int8 pool", [](const Int8PoolGeometry& g) {
    return make_int8_pool_geometry(g.num_layers, g.num_kv_heads, g.head_dim, g.group_tokens, g.blocks);
  });
  if (!checked) return tl::unexpected(checked.error());
  return Int8PoolView(checked->first, checked->second);
}

Int8PoolView Int8PoolView::trusted(std::span<std::byte> segment, const Int8PoolGeometry& geometry) noexcept {
  KVTIER_CHECK(segment.size() >= kPoolRowsOffset + geometry.total_bytes(),
               "int8 pool segment smaller than its geometry");
  return Int8PoolView(segment.subspan(kPoolRowsOffset, geometry.total_bytes()), geometry);
}

std::span<std::byte> Int8PoolView::block(std::uint32_t layer, std::uint32_t block) const noexcept {
  KVTIER_CHECK(layer < geometry_.num_layers && block < geometry_.blocks,
               "int8 pool layer or block out of range");
  return rows_.subspan(geometry_.block_offset(layer, block), geometry_.block_bytes());
}

}  // namespace kvtier::shm
