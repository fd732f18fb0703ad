// Pins the byte layout of every struct kvtier keeps in shared memory. If one of these fails,
// the layout changed: bump kLayoutVersion, update shm/LAYOUT.md, then update the numbers here.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <tuple>

#include "kvtier/shm/layout.hpp"

namespace kvtier::shm {
namespace {

#define KVTIER_EXPECT_OFFSET(Type, field, offset) EXPECT_EQ(offsetof(Type, field), std::size_t{offset})

TEST(ShmLayout, VersionIsSix) { EXPECT_EQ(kLayoutVersion, 6u); }

TEST(ShmLayout, FingerprintIsPinned) {
  // Deliberately hard-coded: a layout change must be a conscious edit here and in LAYOUT.md.
  EXPECT_EQ(kLayoutFingerprint, 0x170039f48b8aefecull);
}

TEST(ShmLayout, MagicReadsKvtiersgInMemory) {
  char text[8];
  std::memcpy(text, &kSegmentMagic, sizeof(text));
  EXPECT_EQ(std::string(text, 8), "KVTIERSG");
}

TEST(ShmLayout, SegmentKindValuesArePinned) {
  EXPECT_EQ(static_cast<std::uint32_t>(SegmentKind::kControl), 1u);
  EXPECT_EQ(static_cast<std::uint32_t>(SegmentKind::kPool), 2u);
  EXPECT_EQ(static_cast<std::uint32_t>(SegmentKind::kInt8Pool), 3u);
}

TEST(ShmLayout, BackpressureReasonValuesArePinned) {
  EXPECT_EQ(static_cast<std::uint32_t>(BackpressureReason::kNone), 0u);
  EXPECT_EQ(static_cast<std::uint32_t>(BackpressureReason::kPoolFull), 1u);
  EXPECT_EQ(static_cast<std::uint32_t>(BackpressureReason::kNodeBudget), 2u);
}

TEST(ShmLayout, SegmentHeader) {
  EXPECT_EQ(sizeof(SegmentHeader), 64u);
  EXPECT_EQ(alignof(SegmentHeader), 64u);
  KVTIER_EXPECT_OFFSET(SegmentHeader, magic, 0);
  KVTIER_EXPECT_OFFSET(SegmentHeader, layout_version, 8);
  KVTIER_EXPECT_OFFSET(SegmentHeader, kind, 12);
  KVTIER_EXPECT_OFFSET(SegmentHeader, header_size, 16);
  KVTIER_EXPECT_OFFSET(SegmentHeader, owner_uid, 20);
  KVTIER_EXPECT_OFFSET(SegmentHeader, segment_size, 24);
  KVTIER_EXPECT_OFFSET(SegmentHeader, layout_fingerprint, 32);
  KVTIER_EXPECT_OFFSET(SegmentHeader, daemon_epoch, 40);
  KVTIER_EXPECT_OFFSET(SegmentHeader, client_id, 48);
  KVTIER_EXPECT_OFFSET(SegmentHeader, ready, 52);
  KVTIER_EXPECT_OFFSET(SegmentHeader, owner_pid, 56);
  KVTIER_EXPECT_OFFSET(SegmentHeader, reserved1, 60);
}

TEST(ShmLayout, ControlBlock) {
  EXPECT_EQ(sizeof(ControlBlock), 64u);
  EXPECT_EQ(alignof(ControlBlock), 64u);
  KVTIER_EXPECT_OFFSET(ControlBlock, score_capacity, 0);
  KVTIER_EXPECT_OFFSET(ControlBlock, plan_capacity, 4);
  KVTIER_EXPECT_OFFSET(ControlBlock, score_record_bytes, 8);
  KVTIER_EXPECT_OFFSET(ControlBlock, plan_record_bytes, 12);
  KVTIER_EXPECT_OFFSET(ControlBlock, score_ring_offset, 16);
  KVTIER_EXPECT_OFFSET(ControlBlock, score_ring_bytes, 24);
  KVTIER_EXPECT_OFFSET(ControlBlock, plan_ring_offset, 32);
  KVTIER_EXPECT_OFFSET(ControlBlock, plan_ring_bytes, 40);
}

TEST(ShmLayout, ScoreRingHeaderPutsEachSideOnItsOwnCacheLine) {
  EXPECT_EQ(sizeof(ScoreRingHeader), 128u);
  EXPECT_EQ(alignof(ScoreRingHeader), 64u);
  KVTIER_EXPECT_OFFSET(ScoreRingHeader, producer, 0);
  KVTIER_EXPECT_OFFSET(ScoreRingHeader, consumer, 64);
  KVTIER_EXPECT_OFFSET(ScoreRingProducerLine, write, 0);
  KVTIER_EXPECT_OFFSET(ScoreRingProducerLine, dropped, 8);
  KVTIER_EXPECT_OFFSET(ScoreRingConsumerLine, read, 0);
  KVTIER_EXPECT_OFFSET(ScoreRingConsumerLine, consumer_waiting, 8);
  KVTIER_EXPECT_OFFSET(ScoreRingConsumerLine, reserved, 12);
}

TEST(ShmLayout, PlanRingHeaderPutsEachSideOnItsOwnCacheLine) {
  EXPECT_EQ(sizeof(PlanRingHeader), 128u + 64u * 16u);
  EXPECT_EQ(alignof(PlanRingHeader), 64u);
  KVTIER_EXPECT_OFFSET(PlanRingHeader, producer, 0);
  KVTIER_EXPECT_OFFSET(PlanRingHeader, consumer, 64);
  KVTIER_EXPECT_OFFSET(PlanRingProducerLine, write, 0);
  KVTIER_EXPECT_OFFSET(PlanRingProducerLine, wake, 8);
  KVTIER_EXPECT_OFFSET(PlanRingProducerLine, producer_waiting, 12);
  KVTIER_EXPECT_OFFSET(PlanRingProducerLine, backpressure_reason, 16);
  KVTIER_EXPECT_OFFSET(PlanRingProducerLine, backpressure_tokens, 24);
  KVTIER_EXPECT_OFFSET(PlanRingProducerLine, ack_read, 32);
  KVTIER_EXPECT_OFFSET(PlanRingConsumerLine, read, 0);
  KVTIER_EXPECT_OFFSET(PlanRingConsumerLine, ack_write, 8);
  KVTIER_EXPECT_OFFSET(PlanRingConsumerLine, consumer_waiting, 16);
  KVTIER_EXPECT_OFFSET(PlanRingConsumerLine, reserved, 20);
}

TEST(ShmLayout, PlanAckSlotsFollowTheCounterLines) {
  EXPECT_EQ(kPlanAckSlots, 64u);
  KVTIER_EXPECT_OFFSET(PlanRingHeader, acks, 128);
  EXPECT_EQ(sizeof(PlanRingHeader::acks), 64u * 16u);
  EXPECT_EQ(sizeof(PlanAck), 16u);
  EXPECT_EQ(alignof(PlanAck), 8u);
  KVTIER_EXPECT_OFFSET(PlanAck, epoch, 0);
  KVTIER_EXPECT_OFFSET(PlanAck, outcome, 8);
  KVTIER_EXPECT_OFFSET(PlanAck, reserved, 12);
}

TEST(ShmLayout, PlanOutcomeValuesArePinned) {
  EXPECT_EQ(static_cast<std::uint32_t>(PlanOutcome::kApplied), 1u);
  EXPECT_EQ(static_cast<std::uint32_t>(PlanOutcome::kFailed), 2u);
  EXPECT_EQ(sizeof(PlanOutcome), sizeof(PlanAck::outcome));
}

TEST(ShmLayout, ScoreKindValuesArePinned) {
  EXPECT_EQ(static_cast<std::uint16_t>(ScoreKind::kAttention), 0u);
  EXPECT_EQ(static_cast<std::uint16_t>(ScoreKind::kStepEnd), 1u);
  EXPECT_EQ(static_cast<std::uint16_t>(ScoreKind::kValueRange), 2u);
  EXPECT_EQ(static_cast<std::uint16_t>(ScoreKind::kKeyDigest), 3u);
  EXPECT_EQ(static_cast<std::uint16_t>(ScoreKind::kAttentionSum), 4u);
  EXPECT_EQ(static_cast<std::uint16_t>(ScoreKind::kRecentSum), 5u);
  EXPECT_EQ(kScoreKindCount, 6u);
  EXPECT_EQ(sizeof(ScoreKind), sizeof(ScoreRecord::kind));
}

TEST(ShmLayout, TierCodesArePinned) {
  EXPECT_EQ(kTierHbm, 0u);
  EXPECT_EQ(kTierDdr, 1u);
  EXPECT_EQ(kTierInt8, 2u);
  EXPECT_EQ(kTierDropped, 3u);
  EXPECT_EQ(kTierPeer, 4u);
  EXPECT_EQ(sizeof(kTierHbm), sizeof(PlanMove::from_tier));
}

TEST(ShmLayout, NoSlotSentinelIsPinned) {
  EXPECT_EQ(kNoSlot, 0xFFFFFFFFu);
  EXPECT_EQ(sizeof(kNoSlot), sizeof(PlanMove::src_slot));
}

TEST(ShmLayout, ScoreRecord) {
  EXPECT_EQ(kScoresPerRecord, 60u);
  EXPECT_EQ(sizeof(ScoreRecord), 256u);
  EXPECT_EQ(alignof(ScoreRecord), 4u);
  KVTIER_EXPECT_OFFSET(ScoreRecord, sequence, 0);
  KVTIER_EXPECT_OFFSET(ScoreRecord, first_position, 4);
  KVTIER_EXPECT_OFFSET(ScoreRecord, count, 8);
  KVTIER_EXPECT_OFFSET(ScoreRecord, kind, 10);
  KVTIER_EXPECT_OFFSET(ScoreRecord, step, 12);
  KVTIER_EXPECT_OFFSET(ScoreRecord, values, 16);
}

TEST(ShmLayout, PlanMove) {
  EXPECT_EQ(sizeof(PlanMove), 16u);
  EXPECT_EQ(alignof(PlanMove), 4u);
  KVTIER_EXPECT_OFFSET(PlanMove, position, 0);
  KVTIER_EXPECT_OFFSET(PlanMove, from_tier, 4);
  KVTIER_EXPECT_OFFSET(PlanMove, to_tier, 5);
  KVTIER_EXPECT_OFFSET(PlanMove, reserved, 6);
  KVTIER_EXPECT_OFFSET(PlanMove, src_slot, 8);
  KVTIER_EXPECT_OFFSET(PlanMove, dst_slot, 12);
}

TEST(ShmLayout, PlanRecord) {
  EXPECT_EQ(kMovesPerRecord, 63u);
  EXPECT_EQ(kPlanLast, 1u);
  EXPECT_EQ(sizeof(PlanRecord), 1024u);
  EXPECT_EQ(alignof(PlanRecord), 8u);
  KVTIER_EXPECT_OFFSET(PlanRecord, epoch, 0);
  KVTIER_EXPECT_OFFSET(PlanRecord, sequence, 8);
  KVTIER_EXPECT_OFFSET(PlanRecord, move_count, 12);
  KVTIER_EXPECT_OFFSET(PlanRecord, flags, 14);
  KVTIER_EXPECT_OFFSET(PlanRecord, moves, 16);
}

TEST(ShmLayout, PoolGeometryAndBlock) {
  EXPECT_EQ(sizeof(PoolGeometry), 20u);
  EXPECT_EQ(alignof(PoolGeometry), 4u);
  KVTIER_EXPECT_OFFSET(PoolGeometry, num_layers, 0);
  KVTIER_EXPECT_OFFSET(PoolGeometry, num_kv_heads, 4);
  KVTIER_EXPECT_OFFSET(PoolGeometry, head_dim, 8);
  KVTIER_EXPECT_OFFSET(PoolGeometry, dtype_bytes, 12);
  KVTIER_EXPECT_OFFSET(PoolGeometry, slots, 16);
  EXPECT_EQ(sizeof(PoolBlock), 64u);
  EXPECT_EQ(alignof(PoolBlock), 64u);
  KVTIER_EXPECT_OFFSET(PoolBlock, geometry, 0);
  KVTIER_EXPECT_OFFSET(PoolBlock, reserved, 20);
  KVTIER_EXPECT_OFFSET(PoolBlock, rows_offset, 24);
  KVTIER_EXPECT_OFFSET(PoolBlock, rows_bytes, 32);
  EXPECT_EQ(kPoolRowsOffset, 4096u);
}

TEST(ShmLayout, Int8PoolGeometryAndBlock) {
  EXPECT_EQ(sizeof(Int8PoolGeometry), 20u);
  EXPECT_EQ(alignof(Int8PoolGeometry), 4u);
  KVTIER_EXPECT_OFFSET(Int8PoolGeometry, num_layers, 0);
  KVTIER_EXPECT_OFFSET(Int8PoolGeometry, num_kv_heads, 4);
  KVTIER_EXPECT_OFFSET(Int8PoolGeometry, head_dim, 8);
  KVTIER_EXPECT_OFFSET(Int8PoolGeometry, group_tokens, 12);
  KVTIER_EXPECT_OFFSET(Int8PoolGeometry, blocks, 16);
  EXPECT_EQ(sizeof(Int8PoolBlock), 64u);
  EXPECT_EQ(alignof(Int8PoolBlock), 64u);
  KVTIER_EXPECT_OFFSET(Int8PoolBlock, geometry, 0);
  KVTIER_EXPECT_OFFSET(Int8PoolBlock, reserved, 20);
  KVTIER_EXPECT_OFFSET(Int8PoolBlock, rows_offset, 24);
  KVTIER_EXPECT_OFFSET(Int8PoolBlock, rows_bytes, 32);
}

TEST(ShmLayout, RingSizesFollowCapacity) {
  EXPECT_EQ(score_ring_bytes(1024), 128u + 1024u * 256u);
  EXPECT_EQ(plan_ring_bytes(16), 1152u + 16u * 1024u);
  EXPECT_EQ(kMaxRingCapacity, 1u << 20);
}

}  // namespace
}  // namespace kvtier::shm
