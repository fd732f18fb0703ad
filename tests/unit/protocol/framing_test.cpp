#include "kvtier/protocol/framing.hpp"

#include <cstddef>
#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include <capnp/message.h>
#include <gtest/gtest.h>

#include "frame_helpers.hpp"
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/protocol/version.hpp"

namespace kvtier::protocol {
namespace {

std::vector<std::byte> hello_frame(std::uint32_t layout_version, const char* name) {
  capnp::MallocMessageBuilder builder;
  auto hello = builder.initRoot<wire::ClientMessage>().initHello();
  hello.setProtocolMajor(kProtocolMajor);
  hello.setLayoutVersion(layout_version);
  hello.setClientName(name);
  return encode_frame(builder).value();
}

std::uint32_t layout_version_of(FrameWords words) {
  auto message = read_message(std::move(words)).value();
  return message.root<wire::ClientMessage>().getHello().getLayoutVersion();
}

std::vector<std::byte> length_prefix(std::uint32_t n) {
  return {std::byte(n & 0xff), std::byte((n >> 8) & 0xff), std::byte((n >> 16) & 0xff),
          std::byte((n >> 24) & 0xff)};
}

TEST(EncodeFrame, PrefixesTheFlatMessageWithItsLittleEndianLength) {
  capnp::MallocMessageBuilder builder;
  builder.initRoot<wire::ClientMessage>().initOpenSequence().setPromptLength(42);
  const auto frame = encode_frame(builder).value();
  const auto flat = test::flat_words(builder);
  const std::size_t payload = flat.size() * sizeof(capnp::word);
  ASSERT_EQ(frame.size(), kFrameHeaderBytes + payload);
  EXPECT_EQ(std::vector<std::byte>(frame.begin(), frame.begin() + 4),
            length_prefix(static_cast<std::uint32_t>(payload)));
  EXPECT_EQ(std::memcmp(frame.data() + 4, flat.data(), payload), 0);
}

TEST(EncodeFrame, RefusesAMessageLargerThanTheLimit) {
  capnp::MallocMessageBuilder builder;
  auto hello = builder.initRoot<wire::ClientMessage>().initHello();
  std::string name(4096, 'x');
  hello.setClientName(name);
  const auto frame = encode_frame(builder, 1024);
  ASSERT_FALSE(frame);
  EXPECT_EQ(frame.error().code, Errc::kLimitExceeded);
  EXPECT_NE(frame.error().message.find("exceeds limit 1024"), std::string::npos);
}

TEST(FrameDecoder, ReturnsNothingUntilAFrameIsComplete) {
  FrameDecoder decoder;
  EXPECT_FALSE(decoder.next_frame());
  const auto frame = hello_frame(7, "a");
  ASSERT_TRUE(decoder.feed(std::span(frame).first(frame.size() - 1)));
  EXPECT_FALSE(decoder.next_frame());
  ASSERT_TRUE(decoder.feed(std::span(frame).last(1)));
  auto words = decoder.next_frame();
  ASSERT_TRUE(words);
  EXPECT_EQ(layout_version_of(std::move(*words)), 7u);
  EXPECT_EQ(decoder.buffered_bytes(), 0u);
}

TEST(FrameDecoder, ReassemblesFramesFedOneByteAtATime) {
  FrameDecoder decoder;
  std::vector<std::byte> stream;
  for (std::uint32_t i = 0; i < 5; ++i) {
    const auto frame = hello_frame(i, "byte-by-byte");
    stream.insert(stream.end(), frame.begin(), frame.end());
  }
  std::vector<std::uint32_t> seen;
  for (const std::byte b : stream) {
    ASSERT_TRUE(decoder.feed(std::span(&b, 1)));
    while (auto words = decoder.next_frame()) seen.push_back(layout_version_of(std::move(*words)));
  }
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(decoder.buffered_bytes(), 0u);
}

TEST(FrameDecoder, SplitsSeveralFramesDeliveredInOneFeed) {
  FrameDecoder decoder;
  std::vector<std::byte> stream;
  for (std::uint32_t i = 0; i < 100; ++i) {
    const auto frame = hello_frame(i, "batched");
    stream.insert(stream.end(), frame.begin(), frame.end());
  }
  // Plus half of one more frame, which must stay buffered.
  const auto partial = hello_frame(100, "partial");
  stream.insert(stream.end(), partial.begin(), partial.begin() + 10);
  ASSERT_TRUE(decoder.feed(stream));
  for (std::uint32_t i = 0; i < 100; ++i) {
    auto words = decoder.next_frame();
    ASSERT_TRUE(words) << i;
    EXPECT_EQ(layout_version_of(std::move(*words)), i);
  }
  EXPECT_FALSE(decoder.next_frame());
  EXPECT_EQ(decoder.buffered_bytes(), 10u);
}

TEST(FrameDecoder, RefusesAnOversizeAnnouncementBeforeItsBytesArrive) {
  FrameDecoder decoder;
  const auto prefix = length_prefix(0xFFFFFFF8u);  // ~4 GiB, a multiple of 8
  const auto status = decoder.feed(prefix);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code, Errc::kLimitExceeded);
  EXPECT_EQ(status.error().message, "frame of 4294967288 bytes exceeds limit 1048576");
  EXPECT_LE(decoder.buffered_bytes(), kFrameHeaderBytes);  // nothing sized by the peer
}

TEST(FrameDecoder, AppliesAConfiguredLimit) {
  FrameDecoder decoder(64);
  const auto frame = hello_frame(1, "a name long enough to pass sixty-four bytes of payload");
  const auto status = decoder.feed(frame);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code, Errc::kLimitExceeded);
  EXPECT_EQ(decoder.max_frame_bytes(), 64u);
}

TEST(FrameDecoder, AcceptsAFrameOfExactlyTheLimit) {
  const std::vector<std::byte> payload(1 << 20);
  FrameDecoder decoder;
  ASSERT_TRUE(decoder.feed(test::frame_bytes(payload)));
  EXPECT_TRUE(decoder.next_frame());
}

TEST(FrameDecoder, RefusesAZeroLengthFrame) {
  FrameDecoder decoder;
  const auto status = decoder.feed(length_prefix(0));
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code, Errc::kProtocol);
}

TEST(FrameDecoder, RefusesALengthThatIsNotAMultipleOfEight) {
  for (std::uint32_t n : {1u, 7u, 9u, 12u, 1023u}) {
    FrameDecoder decoder;
    const auto status = decoder.feed(length_prefix(n));
    ASSERT_FALSE(status) << n;
    EXPECT_EQ(status.error().code, Errc::kProtocol) << n;
    EXPECT_NE(status.error().message.find("not a multiple of 8"), std::string::npos);
  }
}

TEST(FrameDecoder, StaysFailedAfterABadHeader) {
  FrameDecoder decoder;
  const auto good = hello_frame(3, "good");
  std::vector<std::byte> stream(good);
  const auto bad = length_prefix(5);
  stream.insert(stream.end(), bad.begin(), bad.end());
  EXPECT_FALSE(decoder.feed(stream));
  EXPECT_TRUE(decoder.failed());
  const auto again = decoder.feed(good);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Errc::kProtocol);
  // The frame that was complete before the bad header is still delivered.
  auto words = decoder.next_frame();
  ASSERT_TRUE(words);
  EXPECT_EQ(layout_version_of(std::move(*words)), 3u);
}

TEST(FrameDecoder, DeliversEveryFrameOfALongStreamFedInMisalignedChunks) {
  std::vector<std::byte> stream;
  constexpr std::uint32_t kFrames = 20000;
  for (std::uint32_t i = 0; i < kFrames; ++i) {
    const auto frame = hello_frame(i, "steady");
    stream.insert(stream.end(), frame.begin(), frame.end());
  }
  FrameDecoder decoder;
  std::uint32_t expected = 0;
  for (std::size_t at = 0; at < stream.size(); at += 1000) {
    const std::size_t n = std::min<std::size_t>(1000, stream.size() - at);
    ASSERT_TRUE(decoder.feed(std::span(stream).subspan(at, n)));
    while (auto words = decoder.next_frame()) {
      ASSERT_EQ(layout_version_of(std::move(*words)), expected);
      ++expected;
    }
    ASSERT_LT(decoder.buffered_bytes(), 1000u);
  }
  EXPECT_EQ(expected, kFrames);
}

}  // namespace
}  // namespace kvtier::protocol
