// Geometry of a control segment, one per client:
//
//   0     SegmentHeader (64)
//   64    ControlBlock  (64)   capacities, record sizes, ring offsets/sizes (daemon-written)
//   128   score ring: ScoreRingHeader (128) + score_capacity x ScoreRecord (256)
//   ...   plan ring:  PlanRingHeader (128)  + plan_capacity  x PlanRecord (1024)
//   ...   padding to the page size
//
// ControlLayout computes it from the two capacities (daemon) or rebuilds it from a copied
// ControlBlock, checking every field against the recomputed value and the mapping size
// (client, or a daemon adopting a segment). Thread-safety: plain value.
#pragma once

#include <cstdint>

#include "kvtier/base/error.hpp"
#include "kvtier/shm/layout.hpp"

namespace kvtier::shm {

class ControlLayout {
 public:
  // kInvalidArgument unless each capacity is a power of two in [1, kMaxRingCapacity].
  static Result<ControlLayout> make(std::uint32_t score_capacity, std::uint32_t plan_capacity);

  // `block` is a private copy taken out of shared memory; `segment_bytes` the mapping's size.
  // kProtocol naming the first field that differs from the layout its capacities imply, or when
  // the rings would end beyond the segment.
  static Result<ControlLayout> from_block(const ControlBlock& block, std::uint64_t segment_bytes);

  const ControlBlock& block() const noexcept { return block_; }
  std::uint32_t score_capacity() const noexcept { return block_.score_capacity; }
  std::uint32_t plan_capacity() const noexcept { return block_.plan_capacity; }
  // End of the plan ring from the segment base (before page rounding).
  std::uint64_t bytes() const noexcept { return block_.plan_ring_offset + block_.plan_ring_bytes; }
  // What Segment::create needs: bytes() minus the SegmentHeader.
  std::uint64_t payload_bytes() const noexcept { return bytes() - sizeof(SegmentHeader); }

 private:
  explicit ControlLayout(const ControlBlock& block) noexcept : block_(block) {}
  ControlBlock block_;
};

}  // namespace kvtier::shm
