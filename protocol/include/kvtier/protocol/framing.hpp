// Framing of control messages on the daemon's Unix stream socket.
//
// Wire frame = u32 little-endian payload length N, then exactly N bytes of one unpacked flat
// Cap'n Proto message (segment table + segments). N is a non-zero multiple of 8 and at most the
// receiver's limit (kDefaultMaxFrameBytes unless configured). See protocol/PROTOCOL.md.
//
// Receiving is three steps, each treating the peer as hostile:
//   1. FrameDecoder::feed() buffers socket bytes and checks every announced length against the
//      limit before the frame's bytes are accepted (no allocation is ever sized by the peer);
//   2. FrameDecoder::next_frame() hands out one complete frame as 8-byte-aligned words;
//   3. read_message() parses the segment table and walks every pointer once (bounds, nesting and
//      traversal limits), so structurally malformed messages are refused here.
// Field accessors of the generated readers may still throw kj::Exception later (e.g. a traversal
// limit reached through repeated getters, a list of the wrong element size), so callers read
// messages inside capture_protocol_errors(), which turns any exception into Errc::kProtocol.
//
// Thread-safety: free functions are reentrant. FrameDecoder and MessageIn are plain objects:
// one thread at a time per instance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/array.h>
#include <kj/exception.h>

#include "kvtier/base/error.hpp"

namespace kvtier::protocol {

inline constexpr std::size_t kFrameHeaderBytes = 4;
inline constexpr std::size_t kDefaultMaxFrameBytes = std::size_t{1} << 20;
// Cap'n Proto limits applied by read_message(). The traversal budget is a multiple of the frame
// size (Cap'n Proto's docs advise "much larger than the message": getters double-count, and
// read_message's validation walk spends one frame's worth) with a floor for tiny messages; it
// bounds pointer-aliasing amplification to a few MiB of reads per frame.
inline constexpr int kNestingLimit = 16;
inline constexpr std::uint64_t kTraversalWordsPerFrameWord = 4;
inline constexpr std::uint64_t kMinTraversalWords = 8 * 1024;

// One complete frame's payload, 8-byte aligned, owned.
using FrameWords = kj::Array<capnp::word>;

// Length prefix + flat words of `message`. Errors: kLimitExceeded when the payload would exceed
// `max_frame_bytes` (the peer would refuse it). Does not modify `message`.
Result<std::vector<std::byte>> encode_frame(capnp::MessageBuilder& message,
                                            std::size_t max_frame_bytes = kDefaultMaxFrameBytes);

// Incremental frame splitter for one byte stream. Once feed() has failed the stream is
// unusable (framing is lost) and every later feed() returns the same error; frames that were
// complete before the bad header can still be taken with next_frame().
class FrameDecoder {
 public:
  explicit FrameDecoder(std::size_t max_frame_bytes = kDefaultMaxFrameBytes);

  // Appends `bytes` (any split: one byte, several frames) and validates every frame header that
  // is now complete. Errors: kLimitExceeded ("frame of N bytes exceeds limit M"), kProtocol
  // (length 0 or not a multiple of 8).
  Status feed(std::span<const std::byte> bytes);

  // The next complete frame, or nullopt when none is buffered yet.
  std::optional<FrameWords> next_frame();

  // Bytes held: complete frames not yet taken plus a partial frame.
  std::size_t buffered_bytes() const noexcept { return buffer_.size() - head_; }
  bool failed() const noexcept { return error_.has_value(); }
  std::size_t max_frame_bytes() const noexcept { return max_frame_bytes_; }

 private:
  Status scan();

  std::size_t max_frame_bytes_;
  std::vector<std::byte> buffer_;
  std::size_t head_ = 0;     // offset of the first frame not yet handed out
  std::size_t scanned_ = 0;  // offset just past the last complete, validated frame
  std::optional<Error> error_;
};

// A parsed frame: owns the words and the Cap'n Proto reader over them. Move-only.
class MessageIn {
 public:
  MessageIn(MessageIn&&) noexcept = default;
  MessageIn& operator=(MessageIn&&) noexcept = default;
  MessageIn(const MessageIn&) = delete;
  MessageIn& operator=(const MessageIn&) = delete;
  ~MessageIn() = default;

  // The root as T (e.g. kvtier::wire::ClientMessage). May throw kj::Exception, as may the
  // returned reader's accessors: call inside capture_protocol_errors(). The reader is valid
  // while this MessageIn lives.
  template <class T>
  typename T::Reader root() {
    return state_->reader.getRoot<T>();
  }

  std::size_t size_in_words() const noexcept { return state_->words.size(); }

 private:
  friend Result<MessageIn> read_message(FrameWords frame);

  struct State {
    State(FrameWords frame, const capnp::ReaderOptions& options)
        : words(std::move(frame)), reader(words.asPtr(), options) {}
    FrameWords words;                     // declared first: outlives the reader
    capnp::FlatArrayMessageReader reader;
  };

  explicit MessageIn(std::unique_ptr<State> state) : state_(std::move(state)) {}

  std::unique_ptr<State> state_;  // heap-held so moves never relocate the words the reader uses
};

// Parses one frame with nesting limit kNestingLimit and the traversal budget described above,
// checks the segment table covers exactly the frame, the root is a non-null struct pointer and
// every pointer in the message is in bounds and within the nesting limit.
// Errors: kProtocol with Cap'n Proto's description.
Result<MessageIn> read_message(FrameWords frame);

namespace detail {
template <class T>
struct CaptureResult {
  using type = Result<T>;
};
template <>
struct CaptureResult<void> {
  using type = Status;
};
template <class T>
struct CaptureResult<Result<T>> {
  using type = Result<T>;
};
template <class T>
using CaptureResultT = typename CaptureResult<std::remove_cvref_t<T>>::type;
}  // namespace detail

// Runs `fn` (returning void, a value, or a Result) and converts kj::Exception or any other
// exception it throws into Errc::kProtocol. Use around every read of a received message.
template <class Fn>
auto capture_protocol_errors(Fn&& fn) noexcept -> detail::CaptureResultT<std::invoke_result_t<Fn>> {
  using Ret = std::invoke_result_t<Fn>;
  try {
    if constexpr (std::is_void_v<Ret>) {
      std::forward<Fn>(fn)();
      return {};
    } else {
      return std::forward<Fn>(fn)();
    }
  } catch (const kj::Exception& e) {
    return make_error(Errc::kProtocol,
                      std::string("malformed message: ") + e.getDescription().cStr());
  } catch (const std::exception& e) {
    return make_error(Errc::kProtocol, std::string("malformed message: ") + e.what());
  } catch (...) {
    return make_error(Errc::kProtocol, "malformed message: unknown exception");
  }
}

}  // namespace kvtier::protocol
