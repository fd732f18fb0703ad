// Hand-off requests from a hand-driven engine session (raw frames): kvtierd checks an export's
// cache description and T0 list, refuses what a client can correct with an ErrorReply and keeps
// the session, ends it for a frame that breaks the protocol (an fd buffer sent without its fd),
// and honours the export's life cycle (one export per sequence, no self-adoption, a close before
// anyone adopted cancels it).
#include <unistd.h>

#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvtier/protocol/version.hpp"
#include "kvtier/shm/layout.hpp"
#include "raw_peer.hpp"
#include "workload_run.hpp"

namespace kvtier::testing {
namespace {

using ::testing::HasSubstr;

std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

constexpr std::uint32_t kLayers = 2, kHeadDim = 16, kPrompt = 8;

// An engine session with a registered model and one open sequence of `prompt` tokens (all T0),
// whose cache has room for them (at least 16 slots).
class EngineSession {
 public:
  explicit EngineSession(const DaemonUnderTest& daemon, std::uint32_t prompt = kPrompt)
      : peer_(daemon.socket()), prompt_(prompt), slots_(std::max(prompt, 16u)) {
    peer_.send_hello(protocol::kProtocolMajor, protocol::kProtocolMinor, shm::kLayoutVersion, shm::kLayoutFingerprint);
    EXPECT_TRUE(peer_.receive());
    ::close(peer_.take_fd());  // control segment
    ::close(peer_.take_fd());  // doorbell
    capnp::MallocMessageBuilder reg;
    auto r = reg.initRoot<wire::ClientMessage>().initRegisterModel();
    r.setNumLayers(kLayers);
    r.setNumKvHeads(1);
    r.setHeadDim(kHeadDim);
    r.setPoolTokens(64);
    peer_.send(reg);
    EXPECT_TRUE(peer_.receive());
    ::close(peer_.take_fd());  // pool
    sequence_ = open();
  }

  std::uint32_t open() {
    capnp::MallocMessageBuilder message;
    message.initRoot<wire::ClientMessage>().initOpenSequence().setPromptLength(prompt_);
    peer_.send(message);
    auto opened = peer_.receive();
    return opened ? opened->root<wire::DaemonMessage>().getSequenceOpened().getSequenceId() : 0;
  }

  // ExportSequence of a cudaIpc buffer (no fd; kvtierd never opens it) holding an HF-layout
  // cache: layer l's K at 2·l·half(), V right after. `edit` spoils what a test wants spoiled.
  void export_sequence(std::uint32_t sequence, std::uint32_t t0_count,
                       const std::function<void(wire::ExportSequence::Builder)>& edit = {}) {
    const std::uint64_t layer_half = half();
    capnp::MallocMessageBuilder message;
    auto request = message.initRoot<wire::ClientMessage>().initExportSequence();
    request.setSequenceId(sequence);
    auto cache = request.initCache();
    cache.setKind(wire::BufferKind::CUDA_IPC);
    cache.setBytes(2 * kLayers * layer_half);
    std::vector<capnp::byte> handle(64, capnp::byte{7});
    cache.setIpcHandle(capnp::Data::Reader(handle.data(), handle.size()));
    auto k = cache.initKOffsets(kLayers), v = cache.initVOffsets(kLayers);
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      k.set(l, 2 * l * layer_half);
      v.set(l, 2 * l * layer_half + layer_half);
    }
    cache.setNumSlots(slots_);
    cache.setBlockSize(slots_);
    cache.setTokenStride(kHeadDim * 2);
    cache.setHeadStride(layer_half);
    auto positions = request.initT0Positions(t0_count), slots = request.initT0Slots(t0_count);
    for (std::uint32_t p = 0; p < t0_count; ++p) {
      positions.set(p, p);
      slots.set(p, p);
    }
    if (edit) edit(request);
    peer_.send(message);
  }

  void adopt(std::uint64_t token) {
    capnp::MallocMessageBuilder message;
    message.initRoot<wire::ClientMessage>().initAdoptSequence().setHandoffToken(token);
    peer_.send(message);
  }

  void close_sequence(std::uint32_t sequence) {
    capnp::MallocMessageBuilder message;
    message.initRoot<wire::ClientMessage>().initCloseSequence().setSequenceId(sequence);
    peer_.send(message);
  }

  // The token of a SequenceExported reply, or 0 (with the ErrorReply's text in `error`).
  std::uint64_t token(std::string* error = nullptr) {
    auto reply = peer_.receive();
    if (!reply) return 0;
    auto root = reply->root<wire::DaemonMessage>();
    if (root.which() == wire::DaemonMessage::SEQUENCE_EXPORTED) return root.getSequenceExported().getHandoffToken();
    if (error != nullptr && root.which() == wire::DaemonMessage::ERROR) *error = root.getError().getMessage().cStr();
    return 0;
  }

  // The ErrorReply that answers the last request.
  Error error() {
    auto reply = peer_.receive();
    if (!reply) return Error{Errc::kOk, "no reply"};
    auto root = reply->root<wire::DaemonMessage>();
    if (root.which() != wire::DaemonMessage::ERROR) return Error{Errc::kOk, "not an error"};
    return Error{static_cast<Errc>(root.getError().getCode()), root.getError().getMessage().cStr()};
  }

  std::uint32_t sequence() const { return sequence_; }
  RawPeer& peer() { return peer_; }
  // One layer's K (f16, one KV head).
  std::uint64_t half() const { return std::uint64_t{slots_} * kHeadDim * 2; }

 private:
  RawPeer peer_;
  std::uint32_t prompt_, slots_;
  std::uint32_t sequence_ = 0;
};

TEST(HandoffRequest, ACacheOutsideItsBufferIsRefusedNamingTheFieldAndTheSessionStays) {
  DaemonUnderTest daemon(test_name());
  EngineSession client(daemon);
  client.export_sequence(client.sequence(), kPrompt, [&client](wire::ExportSequence::Builder r) {
    r.getCache().setBytes(2 * kLayers * client.half() - 1);  // the last layer's V ends one byte beyond
  });
  const Error refused = client.error();
  EXPECT_EQ(refused.code, Errc::kInvalidArgument);
  EXPECT_THAT(refused.message, HasSubstr("cache"));
  EXPECT_NE(client.open(), 0u) << "the session must stay open";
}

TEST(HandoffRequest, AT0ListThatIsNotTheDaemonsIsRefused) {
  DaemonUnderTest daemon(test_name());
  EngineSession client(daemon);
  client.export_sequence(client.sequence(), kPrompt - 1);  // position 7 left out
  const Error refused = client.error();
  EXPECT_EQ(refused.code, Errc::kInvalidArgument);
  EXPECT_THAT(refused.message, HasSubstr("position 7 is in T0 but not listed"));
  client.export_sequence(client.sequence(), kPrompt + 1);  // position 8 was never seen
  EXPECT_THAT(client.error().message, HasSubstr("position 8 is not in T0"));
  EXPECT_NE(client.open(), 0u);
}

TEST(HandoffRequest, AnFdBufferSentWithoutItsFdEndsTheSession) {
  DaemonUnderTest daemon(test_name());
  EngineSession client(daemon);
  client.export_sequence(client.sequence(), kPrompt, [](wire::ExportSequence::Builder r) {
    r.getCache().setKind(wire::BufferKind::HOST_FD);
    r.getCache().setIpcHandle(capnp::Data::Reader());
  });
  const Error refused = client.error();
  EXPECT_EQ(refused.code, Errc::kProtocol);
  EXPECT_THAT(refused.message, HasSubstr("must carry its fd"));
  EXPECT_TRUE(client.peer().closed_by_daemon());
}

TEST(HandoffRequest, OneExportPerSequenceNoSelfAdoptionAndACloseCancelsIt) {
  DaemonUnderTest daemon(test_name());
  EngineSession exporter(daemon), adopter(daemon);
  exporter.export_sequence(exporter.sequence(), kPrompt);
  std::string why;
  const std::uint64_t token = exporter.token(&why);
  ASSERT_NE(token, 0u) << why << daemon.log();
  exporter.export_sequence(exporter.sequence(), kPrompt);
  EXPECT_THAT(exporter.error().message, HasSubstr("already exported"));
  exporter.adopt(token);
  EXPECT_THAT(exporter.error().message, HasSubstr("cannot adopt its own sequence"));
  // Closing before anyone adopted cancels the export: the token is spent.
  exporter.close_sequence(exporter.sequence());
  auto closed = exporter.peer().receive();
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->root<wire::DaemonMessage>().which(), wire::DaemonMessage::SEQUENCE_CLOSED);
  adopter.adopt(token);
  const Error refused = adopter.error();
  EXPECT_EQ(refused.code, Errc::kNotFound);
  EXPECT_THAT(refused.message, HasSubstr("no sequence is waiting for an adopter"));
}

TEST(HandoffRequest, AHandOffPlanLargerThanTheAdoptersPlanRingIsRefusedNamingTheLimit) {
  // 16 records of 63 moves: a sequence of 1100 live tokens cannot be handed over in one plan.
  DaemonUnderTest daemon(test_name(), {"--set", "limits.plan_ring_records=16"});
  EngineSession exporter(daemon, 1100), adopter(daemon);
  exporter.export_sequence(exporter.sequence(), 1100);
  std::string why;
  const std::uint64_t token = exporter.token(&why);
  ASSERT_NE(token, 0u) << why << daemon.log();
  adopter.adopt(token);
  const Error refused = adopter.error();
  EXPECT_EQ(refused.code, Errc::kLimitExceeded);
  EXPECT_THAT(refused.message, HasSubstr("limits.plan_ring_records"));
  EXPECT_NE(adopter.open(), 0u) << "the adopter's session must stay open";
  // Nothing was lent: the exporter can still cancel the export by closing.
  exporter.close_sequence(exporter.sequence());
  auto closed = exporter.peer().receive();
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->root<wire::DaemonMessage>().which(), wire::DaemonMessage::SEQUENCE_CLOSED);
}

}  // namespace
}  // namespace kvtier::testing
