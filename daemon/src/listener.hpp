// The daemon's listening Unix socket: taken from systemd socket activation (sd_listen_fds)
// when present, else bound in the runtime directory after checking the directory's owner and
// mode. Thread-safety: construct and use on the control-plane thread.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <asio/local/stream_protocol.hpp>

#include "kvtier/base/error.hpp"
#include "kvtier/base/unique_fd.hpp"

namespace kvtier::daemon {

struct ListenerOptions {
  std::filesystem::path socket_path;
  unsigned socket_mode = 0660;  // owner + service group (admins are in the group)
};

// The runtime directory must exist, be a directory owned by our euid (or root) and not be
// writable by others. Creates it (mode 0750) when missing.
Status check_runtime_dir(const std::filesystem::path& dir);

// What systemd passed at start (sd_listen_fds_with_names): the listening socket of socket
// activation, if any, and the fds of the file descriptor store, each with its FDNAME (the pool
// segments a predecessor stored, systemd/README.md). More than one listening socket is refused.
struct PassedFds {
  int socket = -1;
  std::vector<std::pair<std::string, UniqueFd>> stored;
};
Result<PassedFds> take_passed_fds();

// Returns an acceptor listening on the socket: `passed_socket` when systemd passed one (not -1),
// or a freshly bound one (a stale socket file left by a dead daemon is replaced; a live one is
// refused).
Result<asio::local::stream_protocol::acceptor> open_listener(asio::io_context& io, const ListenerOptions& options,
                                                             int passed_socket, bool* socket_activated);

}  // namespace kvtier::daemon
