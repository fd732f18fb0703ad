// Hostile input: garbage, truncation, trailing bytes, deep nesting, cycles and pointer aliasing
// must end in Errc::kProtocol (or a valid message), never in a crash or an unbounded read.
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <capnp/message.h>
#include <capnp/schema.h>
#include <gtest/gtest.h>

#include "frame_helpers.hpp"
#include "kvtier/protocol/control.capnp.h"

namespace kvtier::protocol {
namespace {

// Reads every field the way a careless handler might; returns a checksum so nothing is elided.
std::uint64_t visit(wire::ClientMessage::Reader m) {
  std::uint64_t sum = static_cast<std::uint64_t>(m.which());
  switch (m.which()) {
    case wire::ClientMessage::HELLO: {
      auto h = m.getHello();
      sum += h.getProtocolMajor() + h.getLayoutFingerprint() + h.getClientName().size() +
             static_cast<std::uint64_t>(h.getRole());
      break;
    }
    case wire::ClientMessage::REGISTER_MODEL: {
      auto r = m.getRegisterModel();
      sum += r.getNumLayers() + r.getHeadDim() + r.getModelName().size() +
             static_cast<std::uint64_t>(r.getDtype());
      break;
    }
    case wire::ClientMessage::OPEN_SEQUENCE: sum += m.getOpenSequence().getPromptLength(); break;
    case wire::ClientMessage::CLOSE_SEQUENCE: sum += m.getCloseSequence().getSequenceId(); break;
    case wire::ClientMessage::STATUS_REQUEST: (void)m.getStatusRequest(); break;
    case wire::ClientMessage::EXPORT_SEQUENCE: {
      auto e = m.getExportSequence();
      auto c = e.getCache();
      sum += e.getSequenceId() + c.getBytes() + c.getIpcHandle().size() + c.getKOffsets().size() +
             e.getT0Positions().size() + e.getT0Slots().size();
      for (auto offset : c.getVOffsets()) sum += offset;
      break;
    }
    case wire::ClientMessage::ADOPT_SEQUENCE: sum += m.getAdoptSequence().getHandoffToken(); break;
    case wire::ClientMessage::REATTACH: {
      auto r = m.getReattach();
      sum += r.getPreviousEpoch() + r.getModel().getPoolTokens();
      for (auto s : r.getSequences()) sum += s.getLength() + s.getT1Slots().size() + s.getT3Positions().size();
      break;
    }
    case wire::ClientMessage::EVENTS_REQUEST: sum += m.getEventsRequest().getLimit(); break;
    case wire::ClientMessage::PLACEMENT_REQUEST: {
      auto p = m.getPlacementRequest();
      sum += p.getClientId() + p.getSequenceId() + p.getFirstPosition() + p.getMaxRuns();
      break;
    }
  }
  return sum;
}

std::uint64_t visit(wire::DaemonMessage::Reader m) {
  std::uint64_t sum = static_cast<std::uint64_t>(m.which());
  switch (m.which()) {
    case wire::DaemonMessage::WELCOME: sum += m.getWelcome().getDaemonVersion().size(); break;
    case wire::DaemonMessage::VERSION_MISMATCH:
      sum += m.getVersionMismatch().getMessage().size();
      break;
    case wire::DaemonMessage::ERROR:
      sum += m.getError().getCode() + m.getError().getMessage().size();
      break;
    case wire::DaemonMessage::MODEL_REGISTERED: sum += m.getModelRegistered().getRowBytes(); break;
    case wire::DaemonMessage::SEQUENCE_OPENED: sum += m.getSequenceOpened().getSequenceId(); break;
    case wire::DaemonMessage::SEQUENCE_CLOSED: sum += m.getSequenceClosed().getSequenceId(); break;
    case wire::DaemonMessage::STATUS_REPLY: {
      auto s = m.getStatusReply();
      sum += s.getDaemonVersion().size();
      for (auto c : s.getClients()) {
        sum += c.getName().size() + c.getModelName().size() + c.getErrors();
        for (auto q : c.getSequences()) sum += q.getTokens() + q.getTokensT3();
      }
      break;
    }
    case wire::DaemonMessage::SEQUENCE_EXPORTED: sum += m.getSequenceExported().getHandoffToken(); break;
    case wire::DaemonMessage::REATTACHED: sum += m.getReattached().getRowsAdopted(); break;
    case wire::DaemonMessage::SEQUENCE_ADOPTED: {
      auto a = m.getSequenceAdopted();
      sum += a.getPositions() + a.getCache().getKOffsets().size() + a.getCache().getIpcHandle().size();
      break;
    }
    case wire::DaemonMessage::EVENTS_REPLY: {
      auto e = m.getEventsReply();
      sum += e.getCapacity() + e.getRecorded();
      for (auto v : e.getEvents()) sum += v.getSequence() + v.getClientName().size() + v.getDetail().size();
      break;
    }
    case wire::DaemonMessage::PLACEMENT_REPLY: {
      auto p = m.getPlacementReply();
      sum += p.getLength() + p.getNextPosition();
      for (auto run : p.getRuns()) sum += run.getCount() + static_cast<std::uint64_t>(run.getTier());
      break;
    }
  }
  return sum;
}

// The whole receive path on one payload; returns the first error, if any.
Status receive_and_visit(std::span<const std::byte> payload) {
  FrameDecoder decoder;
  if (auto fed = decoder.feed(test::frame_bytes(payload)); !fed) return fed;
  auto words = decoder.next_frame();
  if (!words) return make_error(Errc::kInternal, "frame not delivered");
  auto message = read_message(std::move(*words));
  if (!message) return tl::unexpected(message.error());
  return capture_protocol_errors([&] {
    volatile std::uint64_t sink = visit(message->root<wire::ClientMessage>());
    sink = sink + visit(message->root<wire::DaemonMessage>());
  });
}

std::span<const std::byte> as_bytes(const std::vector<capnp::word>& words) {
  return std::as_bytes(std::span(words));
}

std::vector<capnp::word> raw_message(const std::vector<std::uint64_t>& segment0) {
  // Single-segment flat message: table word (segment count - 1 = 0, size), then the words.
  std::vector<std::uint64_t> flat;
  flat.push_back(static_cast<std::uint64_t>(segment0.size()) << 32);
  flat.insert(flat.end(), segment0.begin(), segment0.end());
  std::vector<capnp::word> out(flat.size());
  std::memcpy(static_cast<void*>(out.data()), flat.data(), flat.size() * sizeof(std::uint64_t));
  return out;
}

constexpr std::uint64_t struct_pointer(std::int32_t offset, std::uint16_t data,
                                       std::uint16_t ptrs) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(offset) << 2) & 0xFFFFFFFCu) |
         (static_cast<std::uint64_t>(data) << 32) | (static_cast<std::uint64_t>(ptrs) << 48);
}

std::vector<capnp::word> status_reply_words() {
  capnp::MallocMessageBuilder b;
  auto reply = b.initRoot<wire::DaemonMessage>().initStatusReply();
  reply.setDaemonVersion("0.1.0");
  auto clients = reply.initClients(2);
  for (std::uint32_t i = 0; i < 2; ++i) {
    clients[i].setName("engine");
    auto seqs = clients[i].initSequences(3);
    for (std::uint32_t s = 0; s < 3; ++s) seqs[s].setTokens(s);
  }
  return test::flat_words(b);
}

void expect_protocol_error(const Status& status) {
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code, Errc::kProtocol) << to_string(status.error());
}

TEST(MalformedInput, RandomPayloadsYieldProtocolErrorsOrValidMessages) {
  std::mt19937_64 rng(20240611);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::uint64_t> words(1 + rng() % 64);
    for (auto& w : words) w = rng();
    // Half the time give the segment table a plausible shape so parsing gets further.
    if (i % 2 == 0) words[0] = (static_cast<std::uint64_t>(words.size() - 1) << 32);
    const auto status = receive_and_visit(std::as_bytes(std::span(words)));
    if (status) {
      ++accepted;
    } else {
      ASSERT_EQ(status.error().code, Errc::kProtocol) << i << ": " << to_string(status.error());
    }
  }
  RecordProperty("accepted", accepted);
}

TEST(MalformedInput, BitFlippedValidMessagesYieldProtocolErrorsOrValidMessages) {
  const auto valid = status_reply_words();
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    auto words = valid;
    auto* bytes = reinterpret_cast<unsigned char*>(words.data());
    const std::size_t n = words.size() * sizeof(capnp::word);
    for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) {
      bytes[rng() % n] ^= static_cast<unsigned char>(1u << (rng() % 8));
    }
    const auto status = receive_and_visit(as_bytes(words));
    if (!status) {
      ASSERT_EQ(status.error().code, Errc::kProtocol) << i << ": " << to_string(status.error());
    }
  }
}

TEST(MalformedInput, EveryTruncationOfAValidMessageIsRefused) {
  const auto valid = status_reply_words();
  ASSERT_TRUE(receive_and_visit(as_bytes(valid)));
  for (std::size_t n = 1; n < valid.size(); ++n) {
    SCOPED_TRACE(n);
    expect_protocol_error(receive_and_visit(as_bytes(valid).first(n * sizeof(capnp::word))));
  }
}

TEST(MalformedInput, TruncatedFramesOnTheStreamAreHeldNotDelivered) {
  capnp::MallocMessageBuilder b;
  b.initRoot<wire::ClientMessage>().initHello().setClientName("truncated");
  const auto frame = encode_frame(b).value();
  for (std::size_t n = 0; n < frame.size(); ++n) {
    FrameDecoder decoder;
    ASSERT_TRUE(decoder.feed(std::span(frame).first(n)));
    EXPECT_FALSE(decoder.next_frame()) << n;
    EXPECT_EQ(decoder.buffered_bytes(), n);
  }
}

TEST(MalformedInput, TrailingBytesAfterTheMessageAreRefused) {
  auto words = status_reply_words();
  words.push_back(capnp::word{});
  expect_protocol_error(receive_and_visit(as_bytes(words)));
}

TEST(MalformedInput, SegmentCountBeyondTheFrameIsRefused) {
  std::vector<std::uint64_t> words(4, 0);
  words[0] = 0x7FFFFFFFu;  // claims 2^31 segments
  expect_protocol_error(receive_and_visit(std::as_bytes(std::span(words))));
}

TEST(MalformedInput, NullOrNonStructRootIsRefused) {
  expect_protocol_error(receive_and_visit(as_bytes(raw_message({0}))));
  // A list pointer (tag 1) of 0 bytes as root.
  expect_protocol_error(receive_and_visit(as_bytes(raw_message({1}))));
}

std::vector<capnp::word> nested_chain(std::size_t depth) {
  // Root -> struct(0 data, 1 ptr) -> struct -> ... -> null; each pointer targets the next word.
  std::vector<std::uint64_t> segment(depth + 1, struct_pointer(0, 0, 1));
  segment.back() = 0;
  return raw_message(segment);
}

TEST(MalformedInput, ModeratelyNestedStructuresAreAccepted) {
  auto message = read_message(test::to_frame_words(nested_chain(8)));
  EXPECT_TRUE(message) << to_string(message.error());
}

TEST(MalformedInput, NestingBeyondTheLimitIsRefused) {
  auto message = read_message(test::to_frame_words(nested_chain(kNestingLimit + 8)));
  ASSERT_FALSE(message);
  EXPECT_EQ(message.error().code, Errc::kProtocol);
  EXPECT_NE(message.error().message.find("nesting"), std::string::npos) << message.error().message;
}

TEST(MalformedInput, ACyclicStructureIsRefused) {
  // Root -> struct at word 1 whose only pointer targets itself (offset -1).
  auto message = read_message(test::to_frame_words(
      raw_message({struct_pointer(0, 0, 1), struct_pointer(-1, 0, 1)})));
  ASSERT_FALSE(message);
  EXPECT_EQ(message.error().code, Errc::kProtocol);
}

// A StatusReply whose many `sequences` pointers all alias one large list: small on the wire,
// huge when traversed. The traversal budget must stop it.
std::vector<capnp::word> aliased_status_reply(std::uint32_t clients_n, std::uint32_t big_n) {
  capnp::MallocMessageBuilder b(1u << 17, capnp::AllocationStrategy::FIXED_SIZE);
  auto clients = b.initRoot<wire::DaemonMessage>().initStatusReply().initClients(clients_n);
  clients[0].initSequences(big_n);
  for (std::uint32_t i = 1; i < clients_n; ++i) clients[i].initSequences(1);
  auto flat = test::flat_words(b);
  std::vector<std::uint64_t> w(flat.size());
  std::memcpy(w.data(), flat.data(), w.size() * 8);
  EXPECT_EQ(w[0] & 0xFFFFFFFFu, 0u) << "expected a single segment";

  auto is_composite_list = [](std::uint64_t p) { return (p & 3) == 1 && ((p >> 32) & 7) == 7; };
  const std::uint64_t seq_words = capnp::Schema::from<wire::SequenceStatus>()
                                      .getProto().getStruct().getDataWordCount();
  std::int64_t big_target = -1;
  std::vector<std::size_t> small;
  for (std::size_t i = 1; i < w.size(); ++i) {
    if (!is_composite_list(w[i])) continue;
    const std::uint64_t count = w[i] >> 35;
    const auto offset = static_cast<std::int32_t>(static_cast<std::uint32_t>(w[i]) & ~3u) >> 2;
    if (count == big_n * seq_words) big_target = static_cast<std::int64_t>(i) + 1 + offset;
    if (count == seq_words) small.push_back(i);
  }
  EXPECT_GE(big_target, 0);
  EXPECT_EQ(small.size(), clients_n - 1);
  for (std::size_t i : small) {
    const auto offset = static_cast<std::int32_t>(big_target - static_cast<std::int64_t>(i) - 1);
    w[i] = ((big_n * seq_words) << 35) | (7ULL << 32) |
           (static_cast<std::uint64_t>(static_cast<std::uint32_t>(offset) << 2) & 0xFFFFFFFCu) | 1;
  }
  std::memcpy(static_cast<void*>(flat.data()), w.data(), w.size() * 8);
  return flat;
}

TEST(MalformedInput, PointerAliasingAmplificationIsStoppedByTheTraversalLimit) {
  const auto words = aliased_status_reply(300, 4000);
  ASSERT_LT(words.size() * 8, kDefaultMaxFrameBytes);
  expect_protocol_error(receive_and_visit(as_bytes(words)));
}

TEST(MalformedInput, ModestAliasingWithinTheBudgetStillReads) {
  // The same construction at a scale below the budget shows the refusal above is the limit.
  const auto words = aliased_status_reply(3, 100);
  const auto status = receive_and_visit(as_bytes(words));
  EXPECT_TRUE(status) << to_string(status.error());
}

}  // namespace
}  // namespace kvtier::protocol
