// Connection: the client's end of the daemon's Unix socket. Sends frames, receives frames
// together with any fds the daemon passes (SCM_RIGHTS), with a timeout on every wait so a hung
// daemon surfaces as Errc::kUnavailable instead of a hang.
//
// Thread-safety: one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include <capnp/message.h>

#include "kvtier/protocol/framing.hpp"
#include "kvtier/base/unique_fd.hpp"

namespace kvtier::client {

class Connection {
 public:
  static Result<Connection> connect(const std::string& socket_path);

  Status send(capnp::MessageBuilder& message);
  // Sends a frame with `fds` attached to its first byte (SCM_RIGHTS, PROTOCOL.md §3); the fds
  // stay the caller's (the daemon receives copies).
  Status send(capnp::MessageBuilder& message, std::span<const int> fds);
  // The next frame, parsed. Errors: kUnavailable (EOF, timeout), kProtocol.
  Result<protocol::MessageIn> receive(std::chrono::milliseconds timeout);
  // Takes the oldest fd received so far (fds arrive with the frame that announces them).
  Result<UniqueFd> take_fd();
  int fd() const { return socket_.get(); }

 private:
  explicit Connection(UniqueFd socket) : socket_(std::move(socket)) {}
  Status read_some(std::chrono::milliseconds timeout);
  Status send_bytes(const std::byte* data, std::size_t size);

  UniqueFd socket_;
  protocol::FrameDecoder decoder_;
  std::deque<UniqueFd> fds_;
};

}  // namespace kvtier::client
