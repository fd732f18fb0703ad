// ScoreIntake (daemon/src/score_intake.hpp) over a score ring on the heap: a ScoreProducer (the
// client) and the intake's ScoreConsumer over the same bytes, and sequences the test keeps.
#include "score_intake.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "heap_ring.hpp"
#include "kvtier/shm/score_ring.hpp"

namespace kvtier::daemon {
namespace {

constexpr std::uint32_t kCapacity = 256;  // several of the intake's batches

// The channel's side: open sequences, some frozen, and the step ends reported.
class Book final : public ScoreIntake::Sequences {
 public:
  struct Entry {
    tier::SequenceTiers tiers;
    std::optional<std::uint32_t> last_step;
    std::uint32_t digest_dim = 0;
    bool frozen = false;
  };

  // interval 1: every step completes an interval, so per-step scores show after each step end.
  tier::SequenceTiers& open(std::uint32_t id, tier::PolicyKind policy = tier::PolicyKind::kPaper,
                            std::uint32_t digest_dim = 0, std::uint32_t interval = 1) {
    tier::TierParams params;
    params.policy = policy;
    params.interval = interval;
    auto tiers = tier::SequenceTiers::create(0, params, 1024);
    EXPECT_TRUE(tiers) << tiers.error().message;
    return entries.emplace(id, Entry{std::move(*tiers), std::nullopt, digest_dim, false}).first->second.tiers;
  }

  ScoreIntake::Target find(std::uint32_t id) override {
    auto it = entries.find(id);
    if (it == entries.end()) return {};
    if (it->second.frozen) return {.ignored = true};
    return {&it->second.tiers, &it->second.last_step, it->second.digest_dim, false};
  }
  Status step_ended(std::uint32_t id) override {
    ended.push_back(id);
    if (freeze_on_step_end == id) entries.at(id).frozen = true;
    return {};
  }

  std::map<std::uint32_t, Entry> entries;
  std::optional<std::uint32_t> freeze_on_step_end;  // as a channel exporting the sequence would
  std::vector<std::uint32_t> ended;
};

shm::ScoreRecord record(std::uint32_t sequence, shm::ScoreKind kind, std::uint32_t first,
                        std::vector<float> values = {}, std::uint32_t step = 0) {
  shm::ScoreRecord r{};
  r.sequence = sequence;
  r.kind = static_cast<std::uint16_t>(kind);
  r.first_position = first;
  r.step = step;
  r.count = static_cast<std::uint16_t>(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) r.values[i] = values[i];
  return r;
}

shm::ScoreRecord step_end(std::uint32_t sequence, std::uint32_t step) {
  return record(sequence, shm::ScoreKind::kStepEnd, 0, {}, step);
}

class ScoreIntakeTest : public ::testing::Test {
 protected:
  void push(const shm::ScoreRecord& r) { ASSERT_NE(client_.push(r), shm::PushResult::kDropped); }

  testing::HeapRing<shm::ScoreRingHeader> ring_{shm::score_ring_bytes(kCapacity)};
  shm::ScoreProducer client_{ring_.span(), kCapacity};
  ScoreIntake intake_{shm::ScoreConsumer(ring_.span(), kCapacity)};
  Book book_;
};

TEST_F(ScoreIntakeTest, AttentionRecordsAddToTheSequencesScoresAtTheIntervalsLastStepEnd) {
  tier::SequenceTiers& tiers = book_.open(1);
  push(record(1, shm::ScoreKind::kAttention, 2, {0.5f, 1.5f}));
  push(record(1, shm::ScoreKind::kAttention, 3, {1.0f}));
  ASSERT_TRUE(intake_.drain(book_));
  EXPECT_EQ(tiers.length(), 0u);  // accumulated, not yet folded
  push(step_end(1, 0));
  ASSERT_TRUE(intake_.drain(book_));
  EXPECT_EQ(tiers.length(), 4u);
  EXPECT_FLOAT_EQ(tiers.score_of(2), 0.5f);
  EXPECT_FLOAT_EQ(tiers.score_of(3), 2.5f);
  EXPECT_EQ(intake_.records(), 3u);
  EXPECT_EQ(intake_.ignored(), 0u);
}

TEST_F(ScoreIntakeTest, RecordsAfterAStepEndSeeWhatTheChannelDidAtThatStepEnd) {
  tier::SequenceTiers& tiers = book_.open(1, tier::PolicyKind::kPaper, 0, 2);
  book_.freeze_on_step_end = 1;
  push(record(1, shm::ScoreKind::kAttention, 0, {0.5f}));
  push(record(1, shm::ScoreKind::kAttention, 1, {0.5f}));
  push(step_end(1, 0));
  push(record(1, shm::ScoreKind::kAttention, 0, {0.5f}));  // frozen by now: ignored
  push(step_end(1, 1));
  ASSERT_TRUE(intake_.drain(book_));
  EXPECT_EQ(book_.ended, std::vector<std::uint32_t>{1});
  EXPECT_EQ(intake_.ignored(), 2u);
  EXPECT_EQ(tiers.length(), 0u);  // the interval never completed here
}

TEST_F(ScoreIntakeTest, IntervalSumsAddAtOnceAndRecentSumsReachRecentAttention) {
  tier::SequenceTiers& tiers = book_.open(1, tier::PolicyKind::kVase);
  push(record(1, shm::ScoreKind::kAttentionSum, 0, {0.5f, 1.5f}));
  push(record(1, shm::ScoreKind::kRecentSum, 0, {0.25f, 2.0f}));
  ASSERT_TRUE(intake_.drain(book_));
  EXPECT_EQ(tiers.score_of(1), 1.5f);
  EXPECT_EQ(tiers.recent_of(1), 2.0f);
}

TEST_F(ScoreIntakeTest, IntervalSumsBeforeTheIntervalsLastStepEndTheSession) {
  book_.open(1, tier::PolicyKind::kPaper, 0, 4);
  push(record(1, shm::ScoreKind::kAttentionSum, 0, {1.0f}));
  const Status drained = intake_.drain(book_);
  ASSERT_FALSE(drained);
  EXPECT_EQ(drained.error().code, Errc::kInvalidArgument);
  EXPECT_NE(drained.error().message.find("sequence 1"), std::string::npos) << drained.error().message;
}

TEST_F(ScoreIntakeTest, OneDrainAppliesMoreRecordsThanOnePopCopies) {
  tier::SequenceTiers& tiers = book_.open(1);
  constexpr std::size_t kRecords = 3 * ScoreIntake::kBatch + 5;
  for (std::size_t i = 0; i < kRecords; ++i) push(record(1, shm::ScoreKind::kAttention, 0, {1.0f}));
  push(step_end(1, 0));
  ASSERT_TRUE(intake_.drain(book_));
  EXPECT_FLOAT_EQ(tiers.score_of(0), static_cast<float>(kRecords));
  EXPECT_EQ(intake_.records(), kRecords + 1);
}

TEST_F(ScoreIntakeTest, ARecordForAnUnknownSequenceIsNotFound) {
  book_.open(1);
  push(record(2, shm::ScoreKind::kAttention, 0, {1.0f}));
  auto ok = intake_.drain(book_);
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, Errc::kNotFound);
  EXPECT_EQ(ok.error().message, "score record for unknown sequence 2");
}

TEST_F(ScoreIntakeTest, ARecordOfAnUnknownKindIsAProtocolError) {
  tier::SequenceTiers& tiers = book_.open(1);
  shm::ScoreRecord r = record(1, shm::ScoreKind::kAttention, 0, {1.0f});
  r.kind = shm::kScoreKindCount;
  push(r);
  auto ok = intake_.drain(book_);
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, Errc::kProtocol);
  EXPECT_EQ(tiers.length(), 0u);
}

TEST_F(ScoreIntakeTest, AStepEndAdvancesTheSequenceAndIsReported) {
  tier::SequenceTiers& tiers = book_.open(1);
  push(step_end(1, 0));
  push(step_end(1, 7));
  ASSERT_TRUE(intake_.drain(book_));
  EXPECT_EQ(tiers.step(), 2u);
  EXPECT_EQ(book_.entries.at(1).last_step, 7u);
  EXPECT_EQ(book_.ended, (std::vector<std::uint32_t>{1, 1}));
}

TEST_F(ScoreIntakeTest, ARepeatedStepIsInvalidArgument) {
  tier::SequenceTiers& tiers = book_.open(1);
  push(step_end(1, 5));
  push(step_end(1, 5));
  auto ok = intake_.drain(book_);
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(ok.error().message, "sequence 1: step 5 ended after step 5");
  EXPECT_EQ(tiers.step(), 1u);
  EXPECT_EQ(book_.ended.size(), 1u);
}

TEST_F(ScoreIntakeTest, AnEarlierStepIsInvalidArgument) {
  book_.open(1);
  push(step_end(1, 5));
  push(step_end(1, 4));
  auto ok = intake_.drain(book_);
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, Errc::kInvalidArgument);
}

TEST_F(ScoreIntakeTest, RecordsOfAFrozenSequenceAreIgnoredAndCounted) {
  tier::SequenceTiers& tiers = book_.open(1);
  book_.entries.at(1).frozen = true;
  shm::ScoreRecord unknown_kind = record(1, shm::ScoreKind::kAttention, 0, {1.0f});
  unknown_kind.kind = shm::kScoreKindCount;
  push(record(1, shm::ScoreKind::kAttention, 0, {1.0f}));
  push(unknown_kind);
  push(step_end(1, 0));
  ASSERT_TRUE(intake_.drain(book_));
  EXPECT_EQ(intake_.ignored(), 3u);
  EXPECT_EQ(intake_.records(), 3u);
  EXPECT_EQ(tiers.length(), 0u);
  EXPECT_EQ(tiers.step(), 0u);
  EXPECT_TRUE(book_.ended.empty());
}

TEST_F(ScoreIntakeTest, ValueRangeRecordsReachTheSequence) {
  tier::SequenceTiers& vase = book_.open(1, tier::PolicyKind::kVase);
  tier::SequenceTiers& paper = book_.open(2);
  push(record(1, shm::ScoreKind::kValueRange, 4, {0.25f, 0.5f}));
  ASSERT_TRUE(intake_.drain(book_));
  EXPECT_EQ(vase.length(), 6u);  // value ranges extend the sequence like scores
  push(record(2, shm::ScoreKind::kValueRange, 0, {0.25f}));
  auto ok = intake_.drain(book_);  // paper keeps no value ranges: SequenceTiers refuses them
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, Errc::kBadState);
  EXPECT_EQ(ok.error().message.rfind("sequence 2: ", 0), 0u) << ok.error().message;
  EXPECT_EQ(paper.length(), 0u);
}

TEST_F(ScoreIntakeTest, KeyDigestRecordsUseTheSequencesDigestWidth) {
  tier::SequenceTiers& two = book_.open(1, tier::PolicyKind::kRKv, 2);
  tier::SequenceTiers& three = book_.open(2, tier::PolicyKind::kRKv, 3);
  push(record(1, shm::ScoreKind::kKeyDigest, 0, {1.0f, 0.0f, 0.0f, 1.0f}));
  ASSERT_TRUE(intake_.drain(book_));
  EXPECT_EQ(two.length(), 2u);  // four components of width 2: two positions
  push(record(2, shm::ScoreKind::kKeyDigest, 0, {1.0f, 0.0f, 0.0f, 1.0f}));
  auto ok = intake_.drain(book_);  // four components are no whole number of width-3 digests
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(three.length(), 0u);
}

TEST_F(ScoreIntakeTest, AValueTheSequenceRefusesIsItsErrorNamingTheSequence) {
  book_.open(3);
  push(record(3, shm::ScoreKind::kAttention, 0, {-1.0f}));
  auto ok = intake_.drain(book_);
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(ok.error().message.rfind("sequence 3: ", 0), 0u) << ok.error().message;
}

TEST_F(ScoreIntakeTest, ABatchWithAnErrorIsNotCounted) {
  book_.open(1);
  push(record(1, shm::ScoreKind::kAttention, 0, {1.0f}));
  push(record(9, shm::ScoreKind::kAttention, 0, {1.0f}));
  ASSERT_FALSE(intake_.drain(book_));
  EXPECT_EQ(intake_.records(), 0u);
}

TEST_F(ScoreIntakeTest, ACorruptWriteCounterIsAProtocolError) {
  book_.open(1);
  ring_.header().producer.write.store(kCapacity + 1);  // more than a ring's worth ahead of read
  auto ok = intake_.drain(book_);
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, Errc::kProtocol);
}

}  // namespace
}  // namespace kvtier::daemon
