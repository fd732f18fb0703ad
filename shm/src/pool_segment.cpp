#include "kvtier/shm/pool_segment.hpp"

#include <cassert>
#include <cstring>
#include <string>

namespace kvtier::shm {

Result<Segment> create_pool_segment(std::string name, const PoolGeometry& geometry,
                                    std::uint64_t epoch, std::uint32_t client_id) {
  assert(geometry.total_bytes() <= kMaxPoolBytes);
  PoolBlock block{};
  block.geometry = geometry;
  block.rows_offset = kPoolRowsOffset;
  block.rows_bytes = geometry.total_bytes();
  auto init = [&block](std::span<std::byte> payload) {
    std::memcpy(payload.data(), &block, sizeof(PoolBlock));
  };
  return Segment::create(std::move(name), SegmentKind::kPool, pool_payload_bytes(geometry), epoch,
                         client_id, init);
}

Result<PoolView> PoolView::validate(std::span<std::byte> segment) {
  if (segment.size() < sizeof(SegmentHeader) + sizeof(PoolBlock)) {
    return make_error(Errc::kProtocol, "pool segment is " + std::to_string(segment.size()) +
                                           " bytes, too small for its pool block");
  }
  PoolBlock block;  // copy first, then validate the copy
  std::memcpy(&block, segment.data() + sizeof(SegmentHeader), sizeof(PoolBlock));
  const PoolGeometry& g = block.geometry;
  auto geometry = make_pool_geometry(g.num_layers, g.num_kv_heads, g.head_dim, g.dtype_bytes,
                                     g.slots);
  if (!geometry) {
    return make_error(Errc::kProtocol, "pool block: " + geometry.error().message);
  }
  if (block.rows_offset != kPoolRowsOffset) {
    return make_error(Errc::kProtocol, "pool block rows_offset " +
                                           std::to_string(block.rows_offset) + ", expected " +
                                           std::to_string(kPoolRowsOffset));
  }
  if (block.rows_bytes != geometry->total_bytes()) {
    return make_error(Errc::kProtocol, "pool block rows_bytes " + std::to_string(block.rows_bytes) +
                                           ", geometry needs " +
                                           std::to_string(geometry->total_bytes()));
  }
  if (segment.size() < kPoolRowsOffset || block.rows_bytes > segment.size() - kPoolRowsOffset) {
    return make_error(Errc::kProtocol, "pool rows end at byte " +
                                           std::to_string(kPoolRowsOffset + block.rows_bytes) +
                                           ", beyond the segment's " +
                                           std::to_string(segment.size()) + " bytes");
  }
  return PoolView(segment.subspan(kPoolRowsOffset, block.rows_bytes), *geometry);
}

PoolView PoolView::trusted(std::span<std::byte> segment, const PoolGeometry& geometry) noexcept {
  assert(segment.size() >= kPoolRowsOffset + geometry.total_bytes());
  return PoolView(segment.subspan(kPoolRowsOffset, geometry.total_bytes()), geometry);
}

std::span<std::byte> PoolView::layer(std::uint32_t layer) const noexcept {
  assert(layer < geometry_.num_layers);
  return rows_.subspan(layer * geometry_.layer_stride(), geometry_.layer_stride());
}

std::span<std::byte> PoolView::row(std::uint32_t layer, std::uint32_t slot) const noexcept {
  return rows_.subspan(geometry_.row_offset(layer, slot), geometry_.row_bytes());
}

}  // namespace kvtier::shm
