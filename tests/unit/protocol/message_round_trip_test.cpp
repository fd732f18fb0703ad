// Every message type survives encode_frame -> FrameDecoder -> read_message unchanged.
#include <cstdint>

#include <capnp/message.h>
#include <gtest/gtest.h>

#include "frame_helpers.hpp"
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/protocol/defaults.hpp"
#include "kvtier/protocol/framing.hpp"
#include "kvtier/base/error.hpp"
#include "kvtier/protocol/version.hpp"

namespace kvtier::protocol {
namespace {

using test::round_trip;

TEST(MessageRoundTrip, Hello) {
  capnp::MallocMessageBuilder b;
  auto out = b.initRoot<wire::ClientMessage>().initHello();
  out.setProtocolMajor(kProtocolMajor);
  out.setProtocolMinor(kProtocolMinor);
  out.setLayoutVersion(3);
  out.setLayoutFingerprint(0x0123456789abcdefULL);
  out.setClientName("vllm-worker-0");
  out.setRole(wire::SessionRole::ADMIN);
  auto message = round_trip(b);
  auto root = message.root<wire::ClientMessage>();
  ASSERT_EQ(root.which(), wire::ClientMessage::HELLO);
  auto in = root.getHello();
  EXPECT_EQ(in.getProtocolMajor(), kProtocolMajor);
  EXPECT_EQ(in.getProtocolMinor(), kProtocolMinor);
  EXPECT_EQ(in.getLayoutVersion(), 3u);
  EXPECT_EQ(in.getLayoutFingerprint(), 0x0123456789abcdefULL);
  EXPECT_EQ(in.getClientName(), "vllm-worker-0");
  EXPECT_EQ(in.getRole(), wire::SessionRole::ADMIN);
}

TEST(MessageRoundTrip, Welcome) {
  capnp::MallocMessageBuilder b;
  auto out = b.initRoot<wire::DaemonMessage>().initWelcome();
  out.setProtocolMajor(1);
  out.setProtocolMinor(2);
  out.setLayoutVersion(4);
  out.setLayoutFingerprint(~0ULL);
  out.setDaemonEpoch(1234567890123ULL);
  out.setClientId(17);
  out.setDaemonVersion("0.1.0");
  out.setControlSegmentBytes(1 << 16);
  auto message = round_trip(b);
  auto root = message.root<wire::DaemonMessage>();
  ASSERT_EQ(root.which(), wire::DaemonMessage::WELCOME);
  auto in = root.getWelcome();
  EXPECT_EQ(in.getProtocolMajor(), 1);
  EXPECT_EQ(in.getProtocolMinor(), 2);
  EXPECT_EQ(in.getLayoutVersion(), 4u);
  EXPECT_EQ(in.getLayoutFingerprint(), ~0ULL);
  EXPECT_EQ(in.getDaemonEpoch(), 1234567890123ULL);
  EXPECT_EQ(in.getClientId(), 17u);
  EXPECT_EQ(in.getDaemonVersion(), "0.1.0");
  EXPECT_EQ(in.getControlSegmentBytes(), 1u << 16);
}

TEST(MessageRoundTrip, VersionMismatchCarriesBothSides) {
  capnp::MallocMessageBuilder b;
  auto out = b.initRoot<wire::DaemonMessage>().initVersionMismatch();
  out.setDaemonProtocolMajor(2);
  out.setDaemonProtocolMinor(1);
  out.setDaemonLayoutVersion(5);
  out.setDaemonLayoutFingerprint(0xaaaa);
  out.setClientProtocolMajor(1);
  out.setClientProtocolMinor(0);
  out.setClientLayoutVersion(4);
  out.setClientLayoutFingerprint(0xbbbb);
  out.setMessage("daemon speaks 2.1 (layout 5), client 1.0 (layout 4)");
  auto message = round_trip(b);
  auto root = message.root<wire::DaemonMessage>();
  ASSERT_EQ(root.which(), wire::DaemonMessage::VERSION_MISMATCH);
  auto in = root.getVersionMismatch();
  EXPECT_EQ(in.getDaemonProtocolMajor(), 2);
  EXPECT_EQ(in.getDaemonProtocolMinor(), 1);
  EXPECT_EQ(in.getDaemonLayoutVersion(), 5u);
  EXPECT_EQ(in.getDaemonLayoutFingerprint(), 0xaaaau);
  EXPECT_EQ(in.getClientProtocolMajor(), 1);
  EXPECT_EQ(in.getClientProtocolMinor(), 0);
  EXPECT_EQ(in.getClientLayoutVersion(), 4u);
  EXPECT_EQ(in.getClientLayoutFingerprint(), 0xbbbbu);
  EXPECT_EQ(in.getMessage(), "daemon speaks 2.1 (layout 5), client 1.0 (layout 4)");
}

TEST(MessageRoundTrip, ErrorReplyCarriesTheNumericErrc) {
  capnp::MallocMessageBuilder b;
  auto out = b.initRoot<wire::DaemonMessage>().initError();
  out.setCode(static_cast<std::uint32_t>(Errc::kNotFound));
  out.setMessage("sequence 9 not found");
  auto message = round_trip(b);
  auto root = message.root<wire::DaemonMessage>();
  ASSERT_EQ(root.which(), wire::DaemonMessage::ERROR);
  EXPECT_EQ(static_cast<Errc>(root.getError().getCode()), Errc::kNotFound);
  EXPECT_EQ(root.getError().getMessage(), "sequence 9 not found");
}

TEST(MessageRoundTrip, RegisterModel) {
  capnp::MallocMessageBuilder b;
  auto out = b.initRoot<wire::ClientMessage>().initRegisterModel();
  out.setNumLayers(32);
  out.setNumKvHeads(8);
  out.setHeadDim(128);
  out.setDtype(wire::KvDtype::BF16);
  out.setModelName("llama-3-8b");
  out.setPoolTokens(1u << 20);
  auto message = round_trip(b);
  auto root = message.root<wire::ClientMessage>();
  ASSERT_EQ(root.which(), wire::ClientMessage::REGISTER_MODEL);
  auto in = root.getRegisterModel();
  EXPECT_EQ(in.getNumLayers(), 32u);
  EXPECT_EQ(in.getNumKvHeads(), 8u);
  EXPECT_EQ(in.getHeadDim(), 128u);
  EXPECT_EQ(in.getDtype(), wire::KvDtype::BF16);
  EXPECT_EQ(in.getModelName(), "llama-3-8b");
  EXPECT_EQ(in.getPoolTokens(), 1u << 20);
}

TEST(MessageRoundTrip, ModelRegistered) {
  capnp::MallocMessageBuilder b;
  auto out = b.initRoot<wire::DaemonMessage>().initModelRegistered();
  out.setPoolSegmentBytes(17179869184ULL);
  out.setPoolSlots(65536);
  out.setRowBytes(4096);
  auto message = round_trip(b);
  auto root = message.root<wire::DaemonMessage>();
  ASSERT_EQ(root.which(), wire::DaemonMessage::MODEL_REGISTERED);
  EXPECT_EQ(root.getModelRegistered().getPoolSegmentBytes(), 17179869184ULL);
  EXPECT_EQ(root.getModelRegistered().getPoolSlots(), 65536u);
  EXPECT_EQ(root.getModelRegistered().getRowBytes(), 4096u);
}

TEST(MessageRoundTrip, SequenceLifecycle) {
  {
    capnp::MallocMessageBuilder b;
    b.initRoot<wire::ClientMessage>().initOpenSequence().setPromptLength(2048);
    auto message = round_trip(b);
    auto root = message.root<wire::ClientMessage>();
    ASSERT_EQ(root.which(), wire::ClientMessage::OPEN_SEQUENCE);
    EXPECT_EQ(root.getOpenSequence().getPromptLength(), 2048u);
  }
  {
    capnp::MallocMessageBuilder b;
    b.initRoot<wire::DaemonMessage>().initSequenceOpened().setSequenceId(5);
    auto message = round_trip(b);
    auto root = message.root<wire::DaemonMessage>();
    ASSERT_EQ(root.which(), wire::DaemonMessage::SEQUENCE_OPENED);
    EXPECT_EQ(root.getSequenceOpened().getSequenceId(), 5u);
  }
  {
    capnp::MallocMessageBuilder b;
    b.initRoot<wire::ClientMessage>().initCloseSequence().setSequenceId(5);
    auto message = round_trip(b);
    auto root = message.root<wire::ClientMessage>();
    ASSERT_EQ(root.which(), wire::ClientMessage::CLOSE_SEQUENCE);
    EXPECT_EQ(root.getCloseSequence().getSequenceId(), 5u);
  }
  {
    capnp::MallocMessageBuilder b;
    b.initRoot<wire::DaemonMessage>().initSequenceClosed().setSequenceId(5);
    auto message = round_trip(b);
    auto root = message.root<wire::DaemonMessage>();
    ASSERT_EQ(root.which(), wire::DaemonMessage::SEQUENCE_CLOSED);
    EXPECT_EQ(root.getSequenceClosed().getSequenceId(), 5u);
  }
}

TEST(MessageRoundTrip, StatusRequest) {
  capnp::MallocMessageBuilder b;
  b.initRoot<wire::ClientMessage>().initStatusRequest();
  auto message = round_trip(b);
  EXPECT_EQ(message.root<wire::ClientMessage>().which(), wire::ClientMessage::STATUS_REQUEST);
}

void fill_client(wire::ClientStatus::Builder c, std::uint32_t id, std::uint32_t sequences) {
  c.setClientId(id);
  c.setPid(1000 + id);
  c.setUid(100);
  c.setName("engine-" + std::to_string(id));
  c.setRole(wire::SessionRole::ENGINE);
  c.setNumLayers(32);
  c.setNumKvHeads(8);
  c.setHeadDim(128);
  c.setDtype(wire::KvDtype::F16);
  c.setModelName("qwen");
  c.setPoolSlots(4096);
  c.setPoolSlotsUsed(100 + id);
  c.setScoreRecords(1);
  c.setScoresDropped(2);
  c.setPlansSent(3);
  c.setPlansAcked(4);
  c.setErrors(5);
  auto seqs = c.initSequences(sequences);
  for (std::uint32_t s = 0; s < sequences; ++s) {
    seqs[s].setSequenceId(s);
    seqs[s].setPromptLength(10 * s);
    seqs[s].setTokens(4 * s);
    seqs[s].setTokensT0(s);
    seqs[s].setTokensT1(s + 1);
    seqs[s].setTokensT2(s + 2);
    seqs[s].setTokensT3(s + 3);
  }
}

TEST(MessageRoundTrip, StatusReplyWithClientsAndSequences) {
  capnp::MallocMessageBuilder b;
  auto out = b.initRoot<wire::DaemonMessage>().initStatusReply();
  out.setDaemonVersion("0.1.0");
  out.setDaemonEpoch(77);
  out.setProtocolMajor(kProtocolMajor);
  out.setProtocolMinor(kProtocolMinor);
  out.setLayoutVersion(2);
  out.setLayoutFingerprint(0xfeed);
  out.setUptimeSeconds(3600);
  out.setDdrBytesTotal(1ULL << 34);
  out.setDdrBytesUsed(1ULL << 30);
  auto clients = out.initClients(3);
  for (std::uint32_t i = 0; i < 3; ++i) fill_client(clients[i], i, i * 2);

  auto message = round_trip(b);
  auto root = message.root<wire::DaemonMessage>();
  ASSERT_EQ(root.which(), wire::DaemonMessage::STATUS_REPLY);
  auto in = root.getStatusReply();
  EXPECT_EQ(in.getDaemonVersion(), "0.1.0");
  EXPECT_EQ(in.getDaemonEpoch(), 77u);
  EXPECT_EQ(in.getLayoutVersion(), 2u);
  EXPECT_EQ(in.getLayoutFingerprint(), 0xfeedu);
  EXPECT_EQ(in.getUptimeSeconds(), 3600u);
  EXPECT_EQ(in.getDdrBytesTotal(), 1ULL << 34);
  EXPECT_EQ(in.getDdrBytesUsed(), 1ULL << 30);
  auto in_clients = in.getClients();
  ASSERT_EQ(in_clients.size(), 3u);
  for (std::uint32_t i = 0; i < 3; ++i) {
    auto c = in_clients[i];
    EXPECT_EQ(c.getClientId(), i);
    EXPECT_EQ(c.getPid(), 1000 + i);
    EXPECT_EQ(c.getName(), "engine-" + std::to_string(i));
    EXPECT_EQ(c.getModelName(), "qwen");
    EXPECT_EQ(c.getHeadDim(), 128u);
    EXPECT_EQ(c.getPoolSlotsUsed(), 100 + i);
    EXPECT_EQ(c.getErrors(), 5u);
    auto seqs = c.getSequences();
    ASSERT_EQ(seqs.size(), i * 2);
    for (std::uint32_t s = 0; s < seqs.size(); ++s) {
      EXPECT_EQ(seqs[s].getPromptLength(), 10 * s);
      EXPECT_EQ(seqs[s].getTokensT3(), s + 3);
    }
  }
}

TEST(MessageRoundTrip, LargeStatusReplyNearTheFrameLimitReadsFully) {
  // 35 clients x 400 sequences ~ 1 MB (SequenceStatus grew a word in 1.2): every field read
  // twice stays within the traversal budget.
  capnp::MallocMessageBuilder b;
  auto clients = b.initRoot<wire::DaemonMessage>().initStatusReply().initClients(35);
  for (std::uint32_t i = 0; i < 35; ++i) fill_client(clients[i], i, 400);
  auto message = round_trip(b);
  EXPECT_GT(message.size_in_words() * 8, 900u * 1024u);
  const auto status = capture_protocol_errors([&] {
    for (int pass = 0; pass < 2; ++pass) {
      std::uint64_t sum = 0;
      for (auto c : message.root<wire::DaemonMessage>().getStatusReply().getClients()) {
        for (auto s : c.getSequences()) sum += s.getTokensT1();
      }
      EXPECT_EQ(sum, 35u * (400u * 399u / 2 + 400u));
    }
  });
  EXPECT_TRUE(status) << to_string(status.error());
}

TEST(MessageRoundTrip, AFullPlacementPageFitsTheDefaultFrameLimit) {
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<wire::DaemonMessage>().initPlacementReply();
  reply.setLength(~std::uint32_t{0});
  reply.setFirstPosition(~std::uint32_t{0});
  reply.setNextPosition(~std::uint32_t{0});
  auto runs = reply.initRuns(kMaxPlacementRuns);
  for (auto run : runs) {
    run.setTier(wire::Tier::T3);
    run.setCount(~std::uint32_t{0});
  }
  EXPECT_LE(kFrameHeaderBytes + capnp::computeSerializedSizeInWords(message) * sizeof(capnp::word), kDefaultMaxFrameBytes);
}

}  // namespace
}  // namespace kvtier::protocol
