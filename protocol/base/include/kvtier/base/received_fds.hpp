// The file descriptors a recvmsg() received (SCM_RIGHTS), each taken into its owner. Every socket
// reader of kvtier (libkvtier's connection, kvtierd's sessions, the tests' raw peer) collects them
// here, so a passed descriptor is owned from the moment it arrives and can leak nowhere.
// Thread-safety: a pure function of its argument.
#pragma once

#include <sys/socket.h>

#include <vector>

#include "kvtier/base/unique_fd.hpp"

namespace kvtier {

// Every descriptor the SCM_RIGHTS control messages of `msg` carry, in order. Call it after every
// recvmsg() that returned data, whether or not the caller accepts the descriptors (refusing them
// is then dropping the result). MSG_CTRUNC (more than the control buffer held) is the caller's
// to check: the kernel closed those.
std::vector<UniqueFd> received_fds(const msghdr& msg);

}  // namespace kvtier
