// The block that opens a pool segment, DDR (PoolBlock) or int8 (Int8PoolBlock): written by the
// daemon before `ready`, copied and re-validated by a client. The two kinds differ only in their
// geometry type and the function that checks it.
#pragma once

#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "kvtier/base/error.hpp"
#include "kvtier/shm/layout.hpp"
#include "kvtier/shm/segment.hpp"

namespace kvtier::shm::detail {

template <class Block, class Geometry>
Result<Segment> create_block_segment(std::string name, SegmentKind kind, const Geometry& geometry,
                                     std::uint64_t payload_bytes, std::uint64_t epoch, std::uint32_t client_id,
                                     SegmentOwner owner) {
  Block block{};
  block.geometry = geometry;
  block.rows_offset = kPoolRowsOffset;
  block.rows_bytes = geometry.total_bytes();
  auto init = [&block](std::span<std::byte> payload) { std::memcpy(payload.data(), &block, sizeof(block)); };
  return Segment::create(std::move(name), kind, payload_bytes, epoch, client_id, init, owner);
}

// Copies the Block out of `segment`, re-checks its geometry with `check` (Geometry ->
// Result<Geometry>), rows_offset, rows_bytes and the segment bounds. Returns the rows region and
// the checked geometry; kProtocol naming `what` ("pool", "int8 pool") and the field otherwise.
template <class Block, class Check>
auto validate_block(std::span<std::byte> segment, const std::string& what, Check check)
    -> Result<std::pair<std::span<std::byte>, decltype(Block::geometry)>> {
  if (segment.size() < sizeof(SegmentHeader) + sizeof(Block)) {
    return make_error(Errc::kProtocol, what + " segment is " + std::to_string(segment.size()) +
                                           " bytes, too small for its pool block");
  }
  Block block;  // copy first, then validate the copy
  std::memcpy(&block, segment.data() + sizeof(SegmentHeader), sizeof(Block));
  auto geometry = check(block.geometry);
  if (!geometry) return make_error(Errc::kProtocol, what + " block: " + geometry.error().message);
  if (block.rows_offset != kPoolRowsOffset) {
    return make_error(Errc::kProtocol, what + " block rows_offset " + std::to_string(block.rows_offset) +
                                           ", expected " + std::to_string(kPoolRowsOffset));
  }
  if (block.rows_bytes != geometry->total_bytes()) {
    return make_error(Errc::kProtocol, what + " block rows_bytes " + std::to_string(block.rows_bytes) +
                                           ", geometry needs " + std::to_string(geometry->total_bytes()));
  }
  if (segment.size() < kPoolRowsOffset || block.rows_bytes > segment.size() - kPoolRowsOffset) {
    return make_error(Errc::kProtocol, what + " rows end at byte " +
                                           std::to_string(kPoolRowsOffset + block.rows_bytes) +
                                           ", beyond the segment's " + std::to_string(segment.size()) + " bytes");
  }
  return std::pair{segment.subspan(kPoolRowsOffset, block.rows_bytes), *geometry};
}

}  // namespace kvtier::shm::detail
