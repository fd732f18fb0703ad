// Test helpers: push a built message through encode_frame -> FrameDecoder -> read_message.
#pragma once

#include <cstddef>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "kvtier/protocol/framing.hpp"

namespace kvtier::protocol::test {

// Throws std::runtime_error on any failure so a test using it fails loudly.
inline MessageIn round_trip(capnp::MessageBuilder& builder) {
  auto frame = encode_frame(builder);
  if (!frame) throw std::runtime_error(to_string(frame.error()));
  FrameDecoder decoder;
  if (auto fed = decoder.feed(*frame); !fed) throw std::runtime_error(to_string(fed.error()));
  auto words = decoder.next_frame();
  if (!words) throw std::runtime_error("no frame decoded");
  if (decoder.next_frame()) throw std::runtime_error("more than one frame decoded");
  auto message = read_message(std::move(*words));
  if (!message) throw std::runtime_error(to_string(message.error()));
  return std::move(*message);
}

// The flat words of a message, without the length prefix.
inline std::vector<capnp::word> flat_words(capnp::MessageBuilder& builder) {
  auto array = capnp::messageToFlatArray(builder);
  return {array.begin(), array.end()};
}

inline FrameWords to_frame_words(std::span<const capnp::word> words) {
  auto out = kj::heapArray<capnp::word>(words.size());
  if (!words.empty()) {
    std::memcpy(static_cast<void*>(out.begin()), words.data(), words.size_bytes());
  }
  return out;
}

// A wire frame (length prefix + payload) around arbitrary payload bytes.
inline std::vector<std::byte> frame_bytes(std::span<const std::byte> payload) {
  std::vector<std::byte> out(4 + payload.size());
  const auto n = static_cast<std::uint32_t>(payload.size());
  for (std::size_t i = 0; i < 4; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 4, payload.data(), payload.size());
  return out;
}

}  // namespace kvtier::protocol::test
