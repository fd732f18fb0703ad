// A client that writes bad bytes into its own rings (NaN scores, unknown sequences, positions
// out of range, steps backwards, acks for epochs never sent, corrupt ring counters) loses its
// own session with a counted, logged error; every other client keeps working.
#include <unistd.h>

#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvtier/protocol/version.hpp"
#include "kvtier/shm/control_segment.hpp"
#include "kvtier/shm/mapping.hpp"
#include "kvtier/shm/ring_layout.hpp"
#include "raw_peer.hpp"
#include "workload_run.hpp"

namespace kvtier::testing {
namespace {

using ::testing::HasSubstr;

std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

// An engine session driven by hand: raw control frames, rings mapped from the passed fds.
class RogueClient {
 public:
  explicit RogueClient(const DaemonUnderTest& daemon) : peer_(daemon.socket()) {
    peer_.send_hello(protocol::kProtocolMajor, protocol::kProtocolMinor, shm::kLayoutVersion, shm::kLayoutFingerprint);
    auto welcome = peer_.receive();
    EXPECT_TRUE(welcome);
    const int control_fd = peer_.take_fd();
    doorbell_ = peer_.take_fd();
    mapping_.emplace(shm::Mapping::map_segment(control_fd, shm::SegmentKind::kControl, 0).value());
    ::close(control_fd);
    rings_.emplace(shm::client_rings(*mapping_).value());

    capnp::MallocMessageBuilder reg;
    auto r = reg.initRoot<wire::ClientMessage>().initRegisterModel();
    r.setNumLayers(2);
    r.setNumKvHeads(1);
    r.setHeadDim(16);
    r.setPoolTokens(64);
    peer_.send(reg);
    EXPECT_TRUE(peer_.receive());
    capnp::MallocMessageBuilder open;
    open.initRoot<wire::ClientMessage>().initOpenSequence().setPromptLength(8);
    peer_.send(open);
    auto opened = peer_.receive();
    sequence_ = opened->root<wire::DaemonMessage>().getSequenceOpened().getSequenceId();
  }
  ~RogueClient() { ::close(doorbell_); }

  std::uint32_t sequence() const { return sequence_; }
  shm::ClientRings& rings() { return *rings_; }

  void push(std::uint32_t sequence, std::uint32_t first, std::vector<float> values, std::uint32_t step = 0) {
    shm::ScoreRecord record{};
    record.sequence = sequence;
    record.first_position = first;
    record.count = static_cast<std::uint16_t>(values.size());
    record.kind = static_cast<std::uint16_t>(values.empty() ? shm::ScoreKind::kStepEnd : shm::ScoreKind::kAttention);
    record.step = step;
    std::copy(values.begin(), values.end(), record.values);
    rings_->scores.push(record);
  }
  shm::ScoreRingHeader& score_header() {
    const auto layout = shm::read_control_layout(mapping_->bytes()).value();
    return *reinterpret_cast<shm::ScoreRingHeader*>(mapping_->data() + layout.block().score_ring_offset);
  }
  // Wakes the daemon whether or not it announced sleep.
  void ring() {
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(doorbell_, &one, sizeof(one));
  }
  // The daemon's verdict: the ErrorReply it sent before closing this session.
  Error verdict() {
    auto reply = peer_.receive();
    if (!reply) return Error{Errc::kOk, "no reply"};
    auto root = reply->root<wire::DaemonMessage>();
    if (root.which() != wire::DaemonMessage::ERROR) return Error{Errc::kOk, "not an error"};
    return Error{static_cast<Errc>(root.getError().getCode()), root.getError().getMessage().cStr()};
  }
  bool closed() { return peer_.closed_by_daemon(); }

 private:
  RawPeer peer_;
  int doorbell_ = -1;
  std::optional<shm::Mapping> mapping_;
  std::optional<shm::ClientRings> rings_;
  std::uint32_t sequence_ = 0;
};

// Runs `misbehave` while a healthy client decodes; checks the verdict and the healthy run.
void expect_only_rogue_ends(const std::string& name, Errc code, const std::string& text,
                            const std::function<void(RogueClient&)>& misbehave) {
  DaemonUnderTest daemon(name);
  ChildProcess healthy = ChildProcess::spawn(
      {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--name", "healthy", "--steps", "150",
       "--interval", "16", "--window", "16", "--step-us", "1000", "--expect-exact"},
      daemon.dir() / "healthy.log");
  RogueClient rogue(daemon);
  misbehave(rogue);
  rogue.ring();
  const Error error = rogue.verdict();
  EXPECT_EQ(error.code, code) << error.message;
  EXPECT_THAT(error.message, HasSubstr(text));
  EXPECT_TRUE(rogue.closed());
  EXPECT_EQ(healthy.wait(std::chrono::seconds(60)), 0) << daemon.log();
  EXPECT_THAT(daemon.log(), HasSubstr("event=client_ring_error"));
}

TEST(RogueClient, NanScoreEndsOnlyItsSession) {
  expect_only_rogue_ends(test_name(), Errc::kInvalidArgument, "position 3", [](RogueClient& c) {
    c.push(c.sequence(), 0, {0.1f, 0.2f, 0.3f, std::numeric_limits<float>::quiet_NaN()});
  });
}

TEST(RogueClient, NegativeAndInfiniteScoresAreRefused) {
  expect_only_rogue_ends(test_name(), Errc::kInvalidArgument, "position 1", [](RogueClient& c) {
    c.push(c.sequence(), 0, {0.1f, -1.0f});
  });
  expect_only_rogue_ends(test_name() + "inf", Errc::kInvalidArgument, "position 0", [](RogueClient& c) {
    c.push(c.sequence(), 0, {std::numeric_limits<float>::infinity()});
  });
}

TEST(RogueClient, ScoresForAnUnknownSequenceAreRefused) {
  expect_only_rogue_ends(test_name(), Errc::kNotFound, "unknown sequence 999",
                         [](RogueClient& c) { c.push(999, 0, {0.5f}); });
}

TEST(RogueClient, PositionsBeyondTheSequenceLimitAreRefused) {
  expect_only_rogue_ends(test_name(), Errc::kInvalidArgument, "max_tokens", [](RogueClient& c) {
    c.push(c.sequence(), 1u << 20, {0.5f});
  });
}

TEST(RogueClient, StepsGoingBackwardsAreRefused) {
  expect_only_rogue_ends(test_name(), Errc::kInvalidArgument, "step 3 ended after step 5", [](RogueClient& c) {
    c.push(c.sequence(), 0, {}, 5);
    c.push(c.sequence(), 0, {}, 3);
  });
}

TEST(RogueClient, AFeatureItsPolicyDoesNotUseIsRefused) {
  expect_only_rogue_ends(test_name(), Errc::kBadState, "policy paper does not use value ranges", [](RogueClient& c) {
    shm::ScoreRecord record{};
    record.sequence = c.sequence();
    record.count = 1;
    record.kind = static_cast<std::uint16_t>(shm::ScoreKind::kValueRange);
    record.values[0] = 1.0f;
    c.rings().scores.push(record);
  });
}

TEST(RogueClient, AnUnknownRecordKindIsRefused) {
  expect_only_rogue_ends(test_name(), Errc::kProtocol, "unknown kind", [](RogueClient& c) {
    shm::ScoreRecord record{};
    record.sequence = c.sequence();
    record.kind = 77;
    c.rings().scores.push(record);
  });
}

TEST(RogueClient, AckForAnEpochNeverSentIsRefused) {
  expect_only_rogue_ends(test_name(), Errc::kProtocol, "ack", [](RogueClient& c) { c.rings().plans.ack(999); });
}

TEST(RogueClient, ScoreWriteCounterBeyondCapacityIsRefused) {
  expect_only_rogue_ends(test_name(), Errc::kProtocol, "beyond capacity", [](RogueClient& c) {
    c.score_header().producer.write.store(1'000'000, std::memory_order_release);
  });
}

TEST(RogueClient, ScoreWriteCounterMovingBackwardsIsRefused) {
  expect_only_rogue_ends(test_name(), Errc::kProtocol, "backwards", [](RogueClient& c) {
    c.push(c.sequence(), 0, {0.5f});
    c.push(c.sequence(), 0, {0.5f});
    c.ring();
    // The daemon has consumed both records once its read counter says so; only then does
    // write = 1 move backwards (below read). No deadline: ctest's timeout bounds the wait.
    while (c.score_header().consumer.read.load(std::memory_order_acquire) < 2) ::usleep(1'000);
    c.score_header().producer.write.store(1, std::memory_order_release);
  });
}

}  // namespace
}  // namespace kvtier::testing
