// Every byte layout kvtier keeps in shared memory, its version and its fingerprint.
//
// A segment starts with a SegmentHeader; what follows depends on its kind (LAYOUT.md has the
// byte diagrams):
//   control: [SegmentHeader][ControlBlock][score ring][plan ring]        (control_layout.hpp)
//   pool:    [SegmentHeader][PoolBlock][padding to 4096][rows per layer] (pool_segment.hpp)
//   int8:    [SegmentHeader][Int8PoolBlock][padding to 4096][blocks per layer]
//            (int8_pool_segment.hpp)
// Offsets are integers from the segment base, never pointers. The header is written once by
// the daemon before it hands out the fd, `ready` last with release order; readers load `ready`
// with acquire. Any change to a struct here must bump kLayoutVersion (the layout test pins the
// fingerprint, so a silent change fails the build's tests).
// Thread-safety: plain data; see ring_layout.hpp for the concurrently written parts.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kvtier/shm/int8_pool_geometry.hpp"
#include "kvtier/shm/pool_geometry.hpp"
#include "kvtier/shm/records.hpp"
#include "kvtier/shm/ring_layout.hpp"

namespace kvtier::shm {

inline constexpr std::uint32_t kLayoutVersion = 6;

enum class SegmentKind : std::uint32_t { kControl = 1, kPool = 2, kInt8Pool = 3 };

// "KVTIERSG" as it reads in memory on a little-endian machine.
inline constexpr std::uint64_t kSegmentMagic = [] {
  constexpr char kText[] = "KVTIERSG";
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(kText[i]);
  return value;
}();

// SegmentHeader::owner_uid of a segment created for no client process (tests, tools).
inline constexpr std::uint32_t kNoOwnerUid = 0xffffffffu;

struct alignas(kCacheLine) SegmentHeader {
  std::uint64_t magic;           // kSegmentMagic
  std::uint32_t layout_version;  // kLayoutVersion
  SegmentKind kind;
  std::uint32_t header_size;  // sizeof(SegmentHeader); the kind's block starts here
  std::uint32_t owner_uid;    // the client's uid (SO_PEERCRED) at creation; kNoOwnerUid: none
  std::uint64_t segment_size;  // bytes, page-rounded, == the shm object's size
  std::uint64_t layout_fingerprint;
  std::uint64_t daemon_epoch;  // per daemon start; lets a client spot a stale segment
  std::uint32_t client_id;
  std::atomic<std::uint32_t> ready;  // 0 while initialising; 1, stored last with release
  std::uint32_t owner_pid;  // the client's pid at creation; 0: none (adoption, LAYOUT.md)
  std::uint32_t reserved1;
};

// Control segment block, right after the header. Offsets are from the segment base.
struct alignas(kCacheLine) ControlBlock {
  std::uint32_t score_capacity;      // records, power of two
  std::uint32_t plan_capacity;       // records, power of two
  std::uint32_t score_record_bytes;  // sizeof(ScoreRecord)
  std::uint32_t plan_record_bytes;   // sizeof(PlanRecord)
  std::uint64_t score_ring_offset;   // ScoreRingHeader, then slots
  std::uint64_t score_ring_bytes;
  std::uint64_t plan_ring_offset;  // PlanRingHeader, then slots
  std::uint64_t plan_ring_bytes;
};

// Pool segment block, right after the header. Rows start at rows_offset (page aligned).
inline constexpr std::uint64_t kPoolRowsOffset = 4096;
struct alignas(kCacheLine) PoolBlock {
  PoolGeometry geometry;
  std::uint32_t reserved;
  std::uint64_t rows_offset;  // kPoolRowsOffset
  std::uint64_t rows_bytes;   // geometry.total_bytes()
};

// Int8 (T2) pool segment block, right after the header. Blocks start at rows_offset.
struct alignas(kCacheLine) Int8PoolBlock {
  Int8PoolGeometry geometry;
  std::uint32_t reserved;
  std::uint64_t rows_offset;  // kPoolRowsOffset
  std::uint64_t rows_bytes;   // geometry.total_bytes()
};

static_assert(sizeof(SegmentHeader) == 64 && alignof(SegmentHeader) == 64);
static_assert(sizeof(ControlBlock) == 64 && alignof(ControlBlock) == 64);
static_assert(sizeof(PoolBlock) == 64 && alignof(PoolBlock) == 64);
static_assert(sizeof(Int8PoolBlock) == 64 && alignof(Int8PoolBlock) == 64);
static_assert(std::is_standard_layout_v<Int8PoolBlock> && std::is_trivially_copyable_v<Int8PoolBlock>);
static_assert(std::is_standard_layout_v<SegmentHeader>);
static_assert(std::is_standard_layout_v<ControlBlock> && std::is_trivially_copyable_v<ControlBlock>);
static_assert(std::is_standard_layout_v<PoolBlock> && std::is_trivially_copyable_v<PoolBlock>);
static_assert(sizeof(SegmentHeader) + sizeof(PoolBlock) <= kPoolRowsOffset);

namespace detail {
// 64-bit FNV-1a over the little-endian bytes of each value added.
struct Fnv1a {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  constexpr Fnv1a& add(std::uint64_t value) {
    for (int i = 0; i < 8; ++i) {
      hash ^= (value >> (8 * i)) & 0xffu;
      hash *= 0x100000001b3ull;
    }
    return *this;
  }
};
}  // namespace detail

// Hash of the shape of every shared struct: sizeof, alignof and each field's offset, plus the
// constants that fix record and pool geometry. Equal fingerprints => same byte layout.
constexpr std::uint64_t layout_fingerprint() {
  detail::Fnv1a f;
  f.add(kCacheLine).add(kScoresPerRecord).add(kMovesPerRecord).add(kPoolRowsOffset);
  f.add(kScoreKindCount);  // a new record kind changes what a reader must understand
  f.add(kPlanAckSlots);

  f.add(sizeof(SegmentHeader)).add(alignof(SegmentHeader));
  f.add(offsetof(SegmentHeader, magic)).add(offsetof(SegmentHeader, layout_version));
  f.add(offsetof(SegmentHeader, kind)).add(offsetof(SegmentHeader, header_size));
  f.add(offsetof(SegmentHeader, segment_size)).add(offsetof(SegmentHeader, layout_fingerprint));
  f.add(offsetof(SegmentHeader, daemon_epoch)).add(offsetof(SegmentHeader, client_id));
  f.add(offsetof(SegmentHeader, ready)).add(offsetof(SegmentHeader, owner_uid));
  f.add(offsetof(SegmentHeader, owner_pid));

  f.add(sizeof(ControlBlock)).add(alignof(ControlBlock));
  f.add(offsetof(ControlBlock, score_capacity)).add(offsetof(ControlBlock, plan_capacity));
  f.add(offsetof(ControlBlock, score_record_bytes)).add(offsetof(ControlBlock, plan_record_bytes));
  f.add(offsetof(ControlBlock, score_ring_offset)).add(offsetof(ControlBlock, score_ring_bytes));
  f.add(offsetof(ControlBlock, plan_ring_offset)).add(offsetof(ControlBlock, plan_ring_bytes));

  f.add(sizeof(ScoreRingHeader)).add(alignof(ScoreRingHeader));
  f.add(offsetof(ScoreRingHeader, producer)).add(offsetof(ScoreRingHeader, consumer));
  f.add(offsetof(ScoreRingProducerLine, write)).add(offsetof(ScoreRingProducerLine, dropped));
  f.add(offsetof(ScoreRingConsumerLine, read)).add(offsetof(ScoreRingConsumerLine, consumer_waiting));

  f.add(sizeof(PlanRingHeader)).add(alignof(PlanRingHeader));
  f.add(offsetof(PlanRingHeader, producer)).add(offsetof(PlanRingHeader, consumer));
  f.add(offsetof(PlanRingProducerLine, write)).add(offsetof(PlanRingProducerLine, wake));
  f.add(offsetof(PlanRingProducerLine, producer_waiting));
  f.add(offsetof(PlanRingProducerLine, backpressure_reason));
  f.add(offsetof(PlanRingProducerLine, backpressure_tokens)).add(offsetof(PlanRingProducerLine, ack_read));
  f.add(offsetof(PlanRingConsumerLine, read)).add(offsetof(PlanRingConsumerLine, ack_write));
  f.add(offsetof(PlanRingConsumerLine, consumer_waiting));
  f.add(offsetof(PlanRingHeader, acks));

  f.add(sizeof(ScoreRecord)).add(alignof(ScoreRecord));
  f.add(offsetof(ScoreRecord, sequence)).add(offsetof(ScoreRecord, first_position));
  f.add(offsetof(ScoreRecord, count)).add(offsetof(ScoreRecord, kind)).add(offsetof(ScoreRecord, step));
  f.add(offsetof(ScoreRecord, values));

  f.add(sizeof(PlanMove)).add(alignof(PlanMove));
  f.add(offsetof(PlanMove, position)).add(offsetof(PlanMove, from_tier));
  f.add(offsetof(PlanMove, to_tier)).add(offsetof(PlanMove, reserved));
  f.add(offsetof(PlanMove, src_slot)).add(offsetof(PlanMove, dst_slot));

  f.add(sizeof(PlanRecord)).add(alignof(PlanRecord));
  f.add(offsetof(PlanRecord, epoch)).add(offsetof(PlanRecord, sequence));
  f.add(offsetof(PlanRecord, move_count)).add(offsetof(PlanRecord, flags));
  f.add(offsetof(PlanRecord, moves));

  f.add(sizeof(PlanAck)).add(alignof(PlanAck));
  f.add(offsetof(PlanAck, epoch)).add(offsetof(PlanAck, outcome)).add(offsetof(PlanAck, reserved));

  f.add(sizeof(PoolGeometry)).add(alignof(PoolGeometry));
  f.add(offsetof(PoolGeometry, num_layers)).add(offsetof(PoolGeometry, num_kv_heads));
  f.add(offsetof(PoolGeometry, head_dim)).add(offsetof(PoolGeometry, dtype_bytes));
  f.add(offsetof(PoolGeometry, slots));

  f.add(sizeof(PoolBlock)).add(alignof(PoolBlock));
  f.add(offsetof(PoolBlock, geometry)).add(offsetof(PoolBlock, rows_offset));
  f.add(offsetof(PoolBlock, rows_bytes));

  f.add(sizeof(Int8PoolGeometry)).add(alignof(Int8PoolGeometry));
  f.add(offsetof(Int8PoolGeometry, num_layers)).add(offsetof(Int8PoolGeometry, num_kv_heads));
  f.add(offsetof(Int8PoolGeometry, head_dim)).add(offsetof(Int8PoolGeometry, group_tokens));
  f.add(offsetof(Int8PoolGeometry, blocks));
  f.add(sizeof(Int8PoolBlock)).add(alignof(Int8PoolBlock));
  f.add(offsetof(Int8PoolBlock, geometry)).add(offsetof(Int8PoolBlock, rows_offset));
  f.add(offsetof(Int8PoolBlock, rows_bytes));
  return f.hash;
}

inline constexpr std::uint64_t kLayoutFingerprint = layout_fingerprint();

constexpr const char* segment_kind_name(SegmentKind kind) noexcept {
  switch (kind) {
    case SegmentKind::kControl: return "control";
    case SegmentKind::kPool: return "pool";
    case SegmentKind::kInt8Pool: return "int8";
  }
  return "unknown";
}

}  // namespace kvtier::shm
