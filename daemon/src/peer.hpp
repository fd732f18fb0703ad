// Who is on the other end of a Unix socket (SO_PEERCRED), and whether that peer may use admin
// requests. Thread-safety: plain functions.
#pragma once

#include <sys/types.h>

#include <string>

#include "kvtier/base/error.hpp"

namespace kvtier::daemon {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

Result<PeerCredentials> peer_credentials(int socket_fd);

// Root, our own uid, or a member (primary or supplementary) of `admin_group` may use admin
// requests. An empty or unknown group admits only root and our own uid.
bool peer_is_admin(const PeerCredentials& peer, const std::string& admin_group);

}  // namespace kvtier::daemon
