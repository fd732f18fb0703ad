// The daemon's listening Unix socket: taken from systemd socket activation (sd_listen_fds)
// when present, else bound in the runtime directory after checking the directory's owner and
// mode. Thread-safety: construct and use on the control-plane thread.
#pragma once

#include <filesystem>

#include <asio/local/stream_protocol.hpp>

#include "kvtier/protocol/error.hpp"

namespace kvtier::daemon {

struct ListenerOptions {
  std::filesystem::path socket_path;
  unsigned socket_mode = 0660;  // owner + service group (admins are in the group)
};

// The runtime directory must exist, be a directory owned by our euid (or root) and not be
// writable by others. Creates it (mode 0750) when missing.
Status check_runtime_dir(const std::filesystem::path& dir);

// Returns an acceptor listening on the socket: the one systemd passed, or a freshly bound one
// (a stale socket file left by a dead daemon is replaced; a live one is refused).
Result<asio::local::stream_protocol::acceptor> open_listener(asio::io_context& io, const ListenerOptions& options,
                                                             bool* socket_activated);

}  // namespace kvtier::daemon
