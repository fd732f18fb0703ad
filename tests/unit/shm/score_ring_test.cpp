#include "kvtier/shm/score_ring.hpp"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "shm_test_support.hpp"

namespace kvtier::shm {
namespace {

using testing::RingBuffer;

ScoreRecord make_record(std::uint32_t step) {
  ScoreRecord record{};
  record.sequence = 7;
  record.first_position = step * 10;
  record.count = 3;
  record.step = step;
  record.values[0] = static_cast<float>(step);
  return record;
}

struct ScoreRingFixture : ::testing::Test {
  static constexpr std::uint32_t kCapacity = 4;
  RingBuffer<ScoreRingHeader> ring{score_ring_bytes(kCapacity)};
  ScoreProducer producer{ring.span(), kCapacity};
  ScoreConsumer consumer{ring.span(), kCapacity};
};

using ScoreRing = ScoreRingFixture;

TEST_F(ScoreRing, ProducerDropsAndCountsWhenFull) {
  for (std::uint32_t i = 0; i < kCapacity; ++i) {
    EXPECT_EQ(producer.push(make_record(i)), PushResult::kPushed);
  }
  EXPECT_EQ(producer.push(make_record(99)), PushResult::kDropped);
  EXPECT_EQ(producer.push(make_record(100)), PushResult::kDropped);
  EXPECT_EQ(producer.dropped(), 2u);
  EXPECT_EQ(consumer.dropped(), 2u);  // visible to the daemon through shared memory
  EXPECT_EQ(producer.free_slots(), 0u);

  std::array<ScoreRecord, 8> out{};
  auto popped = consumer.pop(out);
  ASSERT_TRUE(popped) << popped.error().message;
  ASSERT_EQ(*popped, kCapacity);
  EXPECT_EQ(out[kCapacity - 1].step, kCapacity - 1);  // the dropped ones never appear
  EXPECT_EQ(producer.free_slots(), kCapacity);
}

TEST_F(ScoreRing, KeepsFifoOrderAcrossWrap) {
  std::vector<std::uint32_t> seen;
  std::uint32_t next = 0;
  std::array<ScoreRecord, 3> out{};
  for (int round = 0; round < 10; ++round) {  // 10 rounds of 3 wrap a 4-slot ring many times
    for (int i = 0; i < 3; ++i) ASSERT_NE(producer.push(make_record(next++)), PushResult::kDropped);
    auto popped = consumer.pop(out);
    ASSERT_TRUE(popped) << popped.error().message;
    for (std::size_t i = 0; i < *popped; ++i) {
      seen.push_back(out[i].step);
      EXPECT_EQ(out[i].first_position, out[i].step * 10);
    }
  }
  ASSERT_EQ(seen.size(), 30u);
  for (std::uint32_t i = 0; i < 30; ++i) EXPECT_EQ(seen[i], i);
}

TEST_F(ScoreRing, PopOfEmptyRingReturnsZero) {
  std::array<ScoreRecord, 2> out{};
  auto popped = consumer.pop(out);
  ASSERT_TRUE(popped);
  EXPECT_EQ(*popped, 0u);
}

TEST_F(ScoreRing, ConsumerRefusesWriteCounterThatJumpsBackwards) {
  for (std::uint32_t i = 0; i < 3; ++i) producer.push(make_record(i));
  std::array<ScoreRecord, 1> out{};
  ASSERT_TRUE(consumer.pop(out));  // saw write = 3
  ring.header().producer.write.store(1);  // a client scribbling on its counter
  auto popped = consumer.pop(out);
  ASSERT_FALSE(popped);
  EXPECT_EQ(popped.error().code, Errc::kProtocol);
  EXPECT_EQ(popped.error().message, "score ring write counter jumped backwards from 3 to 1");
}

TEST_F(ScoreRing, ConsumerRefusesWriteCounterBeyondCapacity) {
  ring.header().producer.write.store(kCapacity + 1);
  std::array<ScoreRecord, 1> out{};
  auto popped = consumer.pop(out);
  ASSERT_FALSE(popped);
  EXPECT_EQ(popped.error().code, Errc::kProtocol);
  EXPECT_NE(popped.error().message.find("beyond capacity"), std::string::npos)
      << popped.error().message;
}

TEST_F(ScoreRing, ConsumerRefusesRecordWithTooManyScores) {
  ScoreRecord record = make_record(0);
  record.count = kScoresPerRecord + 1;
  producer.push(record);
  std::array<ScoreRecord, 1> out{};
  auto popped = consumer.pop(out);
  ASSERT_FALSE(popped);
  EXPECT_EQ(popped.error().code, Errc::kProtocol);
  EXPECT_NE(popped.error().message.find("count 61"), std::string::npos) << popped.error().message;
}

TEST_F(ScoreRing, PushAfterAnnouncedSleepAsksForOneDoorbell) {
  EXPECT_TRUE(consumer.announce_sleep());
  EXPECT_EQ(producer.push(make_record(0)), PushResult::kPushedWake);
  EXPECT_EQ(producer.push(make_record(1)), PushResult::kPushed);  // rung once per sleep
}

TEST_F(ScoreRing, PushWithoutAnnouncedSleepAsksForNoDoorbell) {
  EXPECT_EQ(producer.push(make_record(0)), PushResult::kPushed);
}

TEST_F(ScoreRing, AnnounceSleepRefusesWhileRecordsArePending) {
  producer.push(make_record(0));
  EXPECT_FALSE(consumer.announce_sleep());
  EXPECT_EQ(producer.push(make_record(1)), PushResult::kPushed);  // flag was withdrawn
}

TEST_F(ScoreRing, CancelledSleepAsksForNoDoorbell) {
  ASSERT_TRUE(consumer.announce_sleep());
  consumer.cancel_sleep();
  EXPECT_EQ(producer.push(make_record(0)), PushResult::kPushed);
}

TEST_F(ScoreRing, ViewsResumeFromSharedCounters) {
  for (std::uint32_t i = 0; i < 3; ++i) producer.push(make_record(i));
  std::array<ScoreRecord, 1> out{};
  ASSERT_TRUE(consumer.pop(out));
  ScoreProducer producer2(ring.span(), kCapacity);
  ScoreConsumer consumer2(ring.span(), kCapacity);  // e.g. a restarted daemon adopting the ring
  EXPECT_EQ(producer2.published(), 3u);
  EXPECT_EQ(consumer2.consumed(), 1u);
  std::array<ScoreRecord, 4> rest{};
  auto popped = consumer2.pop(rest);
  ASSERT_TRUE(popped);
  ASSERT_EQ(*popped, 2u);
  EXPECT_EQ(rest[0].step, 1u);
}

std::vector<ScoreRecord> make_records(std::uint32_t first_step, std::uint32_t count) {
  std::vector<ScoreRecord> records;
  for (std::uint32_t i = 0; i < count; ++i) records.push_back(make_record(first_step + i));
  return records;
}

TEST_F(ScoreRing, PushBatchPublishesAllRecordsAtOnceInOrder) {
  const BatchPushResult result = producer.push_batch(make_records(0, 3));
  EXPECT_EQ(result.pushed, 3u);
  EXPECT_EQ(result.dropped, 0u);
  EXPECT_FALSE(result.wake);
  EXPECT_EQ(producer.published(), 3u);
  std::array<ScoreRecord, 8> out{};
  auto popped = consumer.pop(out);
  ASSERT_TRUE(popped) << popped.error().message;
  ASSERT_EQ(*popped, 3u);
  for (std::uint32_t i = 0; i < 3; ++i) EXPECT_EQ(out[i].step, i);
}

TEST_F(ScoreRing, PushBatchWrapsAroundTheEndOfTheRing) {
  std::array<ScoreRecord, 8> out{};
  ASSERT_EQ(producer.push_batch(make_records(0, 3)).pushed, 3u);
  ASSERT_EQ(*consumer.pop(out), 3u);  // write = read = 3: the next batch starts at the last slot
  ASSERT_EQ(producer.push_batch(make_records(3, 4)).pushed, 4u);
  auto popped = consumer.pop(out);
  ASSERT_TRUE(popped) << popped.error().message;
  ASSERT_EQ(*popped, 4u);
  for (std::uint32_t i = 0; i < 4; ++i) EXPECT_EQ(out[i].step, 3 + i);
}

TEST_F(ScoreRing, PushBatchDropsAndCountsWhatDoesNotFit) {
  ASSERT_EQ(producer.push(make_record(0)), PushResult::kPushed);
  const BatchPushResult result = producer.push_batch(make_records(1, 5));
  EXPECT_EQ(result.pushed, kCapacity - 1);
  EXPECT_EQ(result.dropped, 2u);
  EXPECT_EQ(producer.dropped(), 2u);
  EXPECT_EQ(consumer.dropped(), 2u);
  std::array<ScoreRecord, 8> out{};
  auto popped = consumer.pop(out);
  ASSERT_TRUE(popped) << popped.error().message;
  ASSERT_EQ(*popped, kCapacity);
  EXPECT_EQ(out[kCapacity - 1].step, kCapacity - 1);  // the prefix, never the tail
}

TEST_F(ScoreRing, PushBatchAfterAnnouncedSleepAsksForOneDoorbell) {
  ASSERT_TRUE(consumer.announce_sleep());
  EXPECT_TRUE(producer.push_batch(make_records(0, 2)).wake);
  EXPECT_FALSE(producer.push_batch(make_records(2, 1)).wake);  // rung once per sleep
}

TEST_F(ScoreRing, PushBatchOfNothingPublishesNothing) {
  const BatchPushResult result = producer.push_batch({});
  EXPECT_EQ(result.pushed, 0u);
  EXPECT_EQ(producer.published(), 0u);
}

// The per-record form: take() copies any granted record in any order without freeing it, a
// partial release() frees only the first slots (the rest is granted again next round), and a
// bad count is refused from the copy, naming the record's index.
TEST_F(ScoreRing, TakeCopiesGrantedRecordsAndReleaseFreesOnlyThoseReleased) {
  for (std::uint32_t i = 0; i < 3; ++i) ASSERT_EQ(producer.push(make_record(i)), PushResult::kPushed);
  auto granted = consumer.available(2);
  ASSERT_TRUE(granted) << granted.error().message;
  ASSERT_EQ(*granted, 2u);  // at most max
  ScoreRecord out{};
  ASSERT_TRUE(consumer.take(1, out));
  EXPECT_EQ(out.step, 1u);
  ASSERT_TRUE(consumer.take(0, out));
  EXPECT_EQ(out.step, 0u);
  consumer.release(1);
  EXPECT_EQ(consumer.consumed(), 1u);
  EXPECT_EQ(producer.free_slots(), kCapacity - 2);

  granted = consumer.available(8);
  ASSERT_TRUE(granted);
  ASSERT_EQ(*granted, 2u);  // records 1 and 2
  ASSERT_TRUE(consumer.take(0, out));
  EXPECT_EQ(out.step, 1u);
  consumer.release(2);

  ScoreRecord bad = make_record(3);
  bad.count = kScoresPerRecord + 1;
  ASSERT_EQ(producer.push(bad), PushResult::kPushed);
  granted = consumer.available(8);
  ASSERT_TRUE(granted);
  const Status refused = consumer.take(0, out);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::kProtocol);
  EXPECT_NE(refused.error().message.find("score record 3 has count 61"), std::string::npos)
      << refused.error().message;
}

}  // namespace
}  // namespace kvtier::shm
