#include "kvtier/protocol/framing.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include <capnp/any.h>
#include <kj/io.h>

namespace kvtier::protocol {
namespace {

constexpr std::size_t kWordBytes = sizeof(capnp::word);
// Erase consumed bytes from the front of the buffer only when that is worth the move.
constexpr std::size_t kCompactThresholdBytes = 64 * 1024;

std::uint32_t load_le32(const std::byte* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

void store_le32(std::byte* p, std::uint32_t v) {
  p[0] = static_cast<std::byte>(v & 0xff);
  p[1] = static_cast<std::byte>((v >> 8) & 0xff);
  p[2] = static_cast<std::byte>((v >> 16) & 0xff);
  p[3] = static_cast<std::byte>((v >> 24) & 0xff);
}

Status check_frame_length(std::uint64_t length, std::size_t max_frame_bytes) {
  if (length > max_frame_bytes) {
    return make_error(Errc::kLimitExceeded, "frame of " + std::to_string(length) +
                                                " bytes exceeds limit " +
                                                std::to_string(max_frame_bytes));
  }
  if (length == 0) {
    return make_error(Errc::kProtocol, "frame of 0 bytes (a message is at least one word)");
  }
  if (length % kWordBytes != 0) {
    return make_error(Errc::kProtocol, "frame of " + std::to_string(length) +
                                           " bytes is not a multiple of 8");
  }
  return {};
}

}  // namespace

Result<std::vector<std::byte>> encode_frame(capnp::MessageBuilder& message,
                                            std::size_t max_frame_bytes) {
  const std::size_t words = capnp::computeSerializedSizeInWords(message);
  const std::size_t payload = words * kWordBytes;
  const std::size_t limit = std::min<std::size_t>(max_frame_bytes,
                                                  std::numeric_limits<std::uint32_t>::max());
  if (payload > limit) {
    return make_error(Errc::kLimitExceeded, "frame of " + std::to_string(payload) +
                                                " bytes exceeds limit " + std::to_string(limit));
  }
  std::vector<std::byte> frame(kFrameHeaderBytes + payload);
  store_le32(frame.data(), static_cast<std::uint32_t>(payload));
  // Write the flat message straight into the frame, no intermediate copy.
  kj::ArrayPtr<kj::byte> out(reinterpret_cast<kj::byte*>(frame.data() + kFrameHeaderBytes),
                             payload);
  kj::ArrayOutputStream stream(out);
  capnp::writeMessage(stream, message);
  return frame;
}

FrameDecoder::FrameDecoder(std::size_t max_frame_bytes)
    : max_frame_bytes_(std::min<std::size_t>(max_frame_bytes,
                                             std::numeric_limits<std::uint32_t>::max())) {}

Status FrameDecoder::feed(std::span<const std::byte> bytes) {
  if (error_) return tl::unexpected<Error>(*error_);
  buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
  return scan();
}

// Walks headers from scanned_ over every complete frame, validating each, and validates the
// header of a trailing partial frame too, so an oversize announcement is refused as soon as its
// four bytes arrive rather than after the peer has streamed up to the limit.
Status FrameDecoder::scan() {
  while (buffer_.size() - scanned_ >= kFrameHeaderBytes) {
    const std::uint32_t length = load_le32(buffer_.data() + scanned_);
    if (auto status = check_frame_length(length, max_frame_bytes_); !status) {
      error_ = status.error();
      return status;
    }
    if (buffer_.size() - scanned_ - kFrameHeaderBytes < length) break;
    scanned_ += kFrameHeaderBytes + length;
  }
  return {};
}

std::optional<FrameWords> FrameDecoder::next_frame() {
  if (head_ == scanned_) return std::nullopt;
  const std::size_t length = load_le32(buffer_.data() + head_);
  auto words = kj::heapArray<capnp::word>(length / kWordBytes);
  std::memcpy(words.begin(), buffer_.data() + head_ + kFrameHeaderBytes, length);
  head_ += kFrameHeaderBytes + length;

  if (head_ == buffer_.size()) {
    buffer_.clear();
    head_ = scanned_ = 0;
  } else if (head_ >= kCompactThresholdBytes && head_ * 2 >= buffer_.size()) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(head_));
    scanned_ -= head_;
    head_ = 0;
  }
  return words;
}

Result<MessageIn> read_message(FrameWords frame) {
  const std::size_t frame_words = frame.size();
  capnp::ReaderOptions options;
  options.nestingLimit = kNestingLimit;
  options.traversalLimitInWords =
      std::max<std::uint64_t>(kMinTraversalWords, kTraversalWordsPerFrameWord * frame_words);

  return capture_protocol_errors([&]() -> Result<MessageIn> {
    auto state = std::make_unique<MessageIn::State>(std::move(frame), options);
    if (state->reader.getEnd() != state->words.end()) {
      const auto used = static_cast<std::size_t>(state->reader.getEnd() - state->words.begin());
      return make_error(Errc::kProtocol, "frame of " + std::to_string(frame_words * kWordBytes) +
                                             " bytes holds a message of " +
                                             std::to_string(used * kWordBytes) + " bytes");
    }
    auto root = state->reader.getRoot<capnp::AnyPointer>();
    if (root.getPointerType() != capnp::PointerType::STRUCT) {
      return make_error(Errc::kProtocol, "message root is not a struct");
    }
    // One walk over every pointer: out-of-bounds, nesting-limit and cyclic structures throw here
    // instead of in the caller's handler. Its cost (one frame) is part of the traversal budget.
    (void)root.targetSize();
    return MessageIn(std::move(state));
  });
}

}  // namespace kvtier::protocol
