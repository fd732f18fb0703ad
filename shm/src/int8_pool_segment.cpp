#include "kvtier/shm/int8_pool_segment.hpp"

#include <cassert>
#include <cstring>
#include <string>

namespace kvtier::shm {

Result<Segment> create_int8_pool_segment(std::string name, const Int8PoolGeometry& geometry,
                                         std::uint64_t epoch, std::uint32_t client_id) {
  assert(geometry.total_bytes() <= kMaxPoolBytes);
  Int8PoolBlock block{};
  block.geometry = geometry;
  block.rows_offset = kPoolRowsOffset;
  block.rows_bytes = geometry.total_bytes();
  auto init = [&block](std::span<std::byte> payload) { std::memcpy(payload.data(), &block, sizeof(block)); };
  return Segment::create(std::move(name), SegmentKind::kInt8Pool, int8_pool_payload_bytes(geometry), epoch,
                         client_id, init);
}

Result<Int8PoolView> Int8PoolView::validate(std::span<std::byte> segment) {
  if (segment.size() < sizeof(SegmentHeader) + sizeof(Int8PoolBlock)) {
    return make_error(Errc::kProtocol, "int8 pool segment is " + std::to_string(segment.size()) +
                                           " bytes, too small for its pool block");
  }
  Int8PoolBlock block;  // copy first, then validate the copy
  std::memcpy(&block, segment.data() + sizeof(SegmentHeader), sizeof(block));
  const Int8PoolGeometry& g = block.geometry;
  auto geometry = make_int8_pool_geometry(g.num_layers, g.num_kv_heads, g.head_dim, g.group_tokens, g.blocks);
  if (!geometry) return make_error(Errc::kProtocol, "int8 pool block: " + geometry.error().message);
  if (block.rows_offset != kPoolRowsOffset) {
    return make_error(Errc::kProtocol, "int8 pool block rows_offset " + std::to_string(block.rows_offset) +
                                           ", expected " + std::to_string(kPoolRowsOffset));
  }
  if (block.rows_bytes != geometry->total_bytes()) {
    return make_error(Errc::kProtocol, "int8 pool block rows_bytes " + std::to_string(block.rows_bytes) +
                                           ", geometry needs " + std::to_string(geometry->total_bytes()));
  }
  if (segment.size() < kPoolRowsOffset || block.rows_bytes > segment.size() - kPoolRowsOffset) {
    return make_error(Errc::kProtocol, "int8 pool blocks end at byte " +
                                           std::to_string(kPoolRowsOffset + block.rows_bytes) +
                                           ", beyond the segment's " + std::to_string(segment.size()) + " bytes");
  }
  return Int8PoolView(segment.subspan(kPoolRowsOffset, block.rows_bytes), *geometry);
}

Int8PoolView Int8PoolView::trusted(std::span<std::byte> segment, const Int8PoolGeometry& geometry) noexcept {
  assert(segment.size() >= kPoolRowsOffset + geometry.total_bytes());
  return Int8PoolView(segment.subspan(kPoolRowsOffset, geometry.total_bytes()), geometry);
}

std::span<std::byte> Int8PoolView::block(std::uint32_t layer, std::uint32_t block) const noexcept {
  assert(layer < geometry_.num_layers && block < geometry_.blocks);
  return rows_.subspan(geometry_.block_offset(layer, block), geometry_.block_bytes());
}

}  // namespace kvtier::shm
