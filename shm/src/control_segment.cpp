#include "kvtier/shm/control_segment.hpp"

#include <cstring>
#include <new>
#include <string>

#include "kvtier/base/check.hpp"

namespace kvtier::shm {
namespace {

constexpr std::uint64_t kScoreRingOffset = sizeof(SegmentHeader) + sizeof(ControlBlock);

Status check_field(const char* field, std::uint64_t actual, std::uint64_t expected) {
  if (actual == expected) return {};
  return make_error(Errc::kProtocol, std::string("control block ") + field + " " +
                                         std::to_string(actual) + ", expected " +
                                         std::to_string(expected));
}

}  // namespace

Result<ControlLayout> ControlLayout::make(std::uint32_t score_capacity,
                                          std::uint32_t plan_capacity) {
  if (!is_valid_ring_capacity(score_capacity) || !is_valid_ring_capacity(plan_capacity)) {
    return make_error(Errc::kInvalidArgument,
                      "ring capacities " + std::to_string(score_capacity) + " (score) and " +
                          std::to_string(plan_capacity) + " (plan) must be powers of two in [1, " +
                          std::to_string(kMaxRingCapacity) + "]");
  }
  ControlBlock block{};
  block.score_capacity = score_capacity;
  block.plan_capacity = plan_capacity;
  block.score_record_bytes = sizeof(ScoreRecord);
  block.plan_record_bytes = sizeof(PlanRecord);
  block.score_ring_offset = kScoreRingOffset;
  block.score_ring_bytes = score_ring_bytes(score_capacity);
  block.plan_ring_offset = block.score_ring_offset + block.score_ring_bytes;
  block.plan_ring_bytes = plan_ring_bytes(plan_capacity);
  return ControlLayout(block);
}

Result<ControlLayout> ControlLayout::from_block(const ControlBlock& block,
                                                std::uint64_t segment_bytes) {
  if (!is_valid_ring_capacity(block.score_capacity)) {
    return make_error(Errc::kProtocol, "control block score_capacity " +
                                           std::to_string(block.score_capacity) +
                                           " is not a power of two in [1, " +
                                           std::to_string(kMaxRingCapacity) + "]");
  }
  if (!is_valid_ring_capacity(block.plan_capacity)) {
    return make_error(Errc::kProtocol, "control block plan_capacity " +
                                           std::to_string(block.plan_capacity) +
                                           " is not a power of two in [1, " +
                                           std::to_string(kMaxRingCapacity) + "]");
  }
  auto expected = make(block.score_capacity, block.plan_capacity);
  KVTIER_CHECK(expected.has_value(), "a validated control block has no layout");
  const ControlBlock& want = expected->block();
  for (auto check : {
           check_field("score_record_bytes", block.score_record_bytes, want.score_record_bytes),
           check_field("plan_record_bytes", block.plan_record_bytes, want.plan_record_bytes),
           check_field("score_ring_offset", block.score_ring_offset, want.score_ring_offset),
           check_field("score_ring_bytes", block.score_ring_bytes, want.score_ring_bytes),
           check_field("plan_ring_offset", block.plan_ring_offset, want.plan_ring_offset),
           check_field("plan_ring_bytes", block.plan_ring_bytes, want.plan_ring_bytes)}) {
    if (!check) return tl::unexpected(std::move(check.error()));
  }
  if (expected->bytes() > segment_bytes) {
    return make_error(Errc::kProtocol, "control block rings end at byte " +
                                           std::to_string(expected->bytes()) +
                                           ", beyond the segment's " +
                                           std::to_string(segment_bytes) + " bytes");
  }
  return expected;
}

Result<Segment> create_control_segment(std::string name, const ControlLayout& layout,
                                       std::uint64_t epoch, std::uint32_t client_id) {
  const ControlBlock& block = layout.block();
  auto init = [&block](std::span<std::byte> payload) {
    // Payload offsets are segment offsets minus the SegmentHeader.
    std::memcpy(payload.data(), &block, sizeof(ControlBlock));
    new (payload.data() + (block.score_ring_offset - sizeof(SegmentHeader))) ScoreRingHeader{};
    new (payload.data() + (block.plan_ring_offset - sizeof(SegmentHeader))) PlanRingHeader{};
  };
  return Segment::create(std::move(name), SegmentKind::kControl, layout.payload_bytes(), epoch,
                         client_id, init);
}

Result<ControlLayout> read_control_layout(std::span<const std::byte> segment) {
  if (segment.size() < kScoreRingOffset) {
    return make_error(Errc::kProtocol, "control segment is " + std::to_string(segment.size()) +
                                           " bytes, too small for its control block");
  }
  ControlBlock copy;  // copy first: the client can rewrite the block at any time
  std::memcpy(&copy, segment.data() + sizeof(SegmentHeader), sizeof(ControlBlock));
  return ControlLayout::from_block(copy, segment.size());
}

DaemonRings daemon_rings(const Segment& segment, const ControlLayout& layout) {
  KVTIER_CHECK(segment.kind() == SegmentKind::kControl && segment.size() >= layout.bytes(),
               "not a control segment, or smaller than its layout");
  const ControlBlock& block = layout.block();
  const auto bytes = segment.bytes();
  return DaemonRings{
      ScoreConsumer(bytes.subspan(block.score_ring_offset, block.score_ring_bytes),
                    block.score_capacity),
      PlanProducer(bytes.subspan(block.plan_ring_offset, block.plan_ring_bytes),
                   block.plan_capacity)};
}

Result<ClientRings> client_rings(const Mapping& mapping) {
  if (mapping.header().kind != SegmentKind::kControl) {
    return make_error(Errc::kProtocol, std::string("segment kind ") +
                                           segment_kind_name(mapping.header().kind) +
                                           " is not a control segment");
  }
  auto layout = read_control_layout(mapping.bytes());
  if (!layout) return tl::unexpected(std::move(layout.error()));
  const ControlBlock& block = layout->block();
  const auto bytes = mapping.bytes();
  return ClientRings{
      ScoreProducer(bytes.subspan(block.score_ring_offset, block.score_ring_bytes),
                    block.score_capacity),
      PlanConsumer(bytes.subspan(block.plan_ring_offset, block.plan_ring_bytes),
                   block.plan_capacity)};
}

}  // namespace kvtier::shm
