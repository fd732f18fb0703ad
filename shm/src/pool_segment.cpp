#include "kvtier/shm/pool_segment.hpp"

#include <string>

#include "kvtier/base/check.hpp"
#include "pool_block.hpp"

namespace kvtier::shm {

Result<Segment> create_pool_segment(std::string name, const PoolGeometry& geometry,
                                    std::uint64_t epoch, std::uint32_t client_id, SegmentOwner owner) {
  KVTIER_CHECK(geometry.total_bytes() <= kMaxPoolBytes, "pool geometry beyond kMaxPoolBytes");
  return detail::create_block_segment<PoolBlock>(std::move(name), SegmentKind::kPool, geometry,
                                                 pool_payload_bytes(geometry), epoch, client_id, owner);
}

Result<PoolView> PoolView::validate(std::span<std::byte> segment) {
  auto checked = detail::validate_block<PoolBlock>(segment, "pool", [](const PoolGeometry& g) {
    return make_pool_geometry(g.num_layers, g.num_kv_heads, g.head_dim, g.dtype_bytes, g.slots);
  });
  if (!checked) return tl::unexpected(checked.error());
  return PoolView(checked->first, checked->second);
}

PoolView PoolView::trusted(std::span<std::byte> segment, const PoolGeometry& geometry) noexcept {
  KVTIER_CHECK(segment.size() >= kPoolRowsOffset + geometry.total_bytes(),
               "pool segment smaller than its geometry");
  return PoolView(segment.subspan(kPoolRowsOffset, geometry.total_bytes()), geometry);
}

std::span<std::byte> PoolView::layer(std::uint32_t layer) const noexcept {
  KVTIER_CHECK(layer < geometry_.num_layers, "pool layer out of range");
  return rows_.subspan(layer * geometry_.layer_stride(), geometry_.layer_stride());
}

std::span<std::byte> PoolView::row(std::uint32_t layer, std::uint32_t slot) const noexcept {
  return rows_.subspan(geometry_.row_offset(layer, slot), geometry_.row_bytes());
}

}  // namespace kvtier::shm
