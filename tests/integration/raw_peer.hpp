// Test support: a hand-driven peer on the daemon socket that sends whatever bytes a test wants
// (wrong versions, malformed and oversized frames) and reads the daemon's replies.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <optional>
#include <span>
#include <vector>

#include <capnp/message.h>

#include "kvtier/base/unique_fd.hpp"
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/protocol/framing.hpp"

namespace kvtier::testing {

class RawPeer {
 public:
  explicit RawPeer(const std::filesystem::path& socket);
  ~RawPeer();

  void send_bytes(const std::vector<std::byte>& bytes);
  void send(capnp::MessageBuilder& message);
  // A frame with `fds` on its first byte (SCM_RIGHTS, PROTOCOL.md §3).
  void send(capnp::MessageBuilder& message, std::span<const int> fds);
  void send_hello(std::uint16_t major, std::uint16_t minor, std::uint32_t layout_version,
                  std::uint64_t fingerprint, wire::SessionRole role = wire::SessionRole::ENGINE);
  // The next reply, or nullopt when the daemon closed the connection (or timeout).
  std::optional<protocol::MessageIn> receive(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // The oldest fd the daemon passed (SCM_RIGHTS), or -1. The caller owns it.
  int take_fd();
  // True when the daemon has closed its end (EOF) within the timeout.
  bool closed_by_daemon(std::chrono::milliseconds timeout = std::chrono::seconds(5));

 private:
  int fd_ = -1;
  protocol::FrameDecoder decoder_;
  std::deque<UniqueFd> fds_;
};

}  // namespace kvtier::testing
