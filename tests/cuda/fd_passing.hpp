// Test helpers for handing a file descriptor to another process over a Unix stream socket
// (SCM_RIGHTS), as a client hands a cuMem export to the daemon or a peer. No gtest dependency
// (kvtier_vmm_peer uses them too).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvtier/base/error.hpp"
#include "kvtier/base/unique_fd.hpp"

namespace kvtier::kernels::cuda::testing {

// What the exporter sends with the fd: the key the peer caches it under, its size, and the seed of
// the pattern the exporter wrote.
struct VmmOffer {
  std::uint64_t exporter = 0;
  std::uint64_t buffer = 0;
  std::uint64_t bytes = 0;
  std::uint64_t seed = 0;
};

// Sends `offer` with `fd` attached (a duplicate travels; the caller keeps `fd`).
inline Status send_offer(int socket, const VmmOffer& offer, int fd) {
  VmmOffer copy = offer;
  iovec data{&copy, sizeof(copy)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  const ssize_t sent = ::sendmsg(socket, &message, MSG_NOSIGNAL);
  if (sent < 0) return os_error("sendmsg(SCM_RIGHTS)");
  if (static_cast<std::size_t>(sent) != sizeof(copy)) {
    return make_error(Errc::kOsError, "sendmsg(SCM_RIGHTS): short write");
  }
  return {};
}

// Receives one offer and the fd that came with it (owned by the result; close-on-exec).
inline Result<UniqueFd> receive_offer(int socket, VmmOffer& offer) {
  iovec data{&offer, sizeof(offer)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  const ssize_t got = ::recvmsg(socket, &message, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  if (got < 0) return os_error("recvmsg(SCM_RIGHTS)");
  if (static_cast<std::size_t>(got) != sizeof(offer) || (message.msg_flags & MSG_CTRUNC) != 0) {
    return make_error(Errc::kProtocol, "recvmsg(SCM_RIGHTS): short offer or truncated fds");
  }
  for (cmsghdr* h = CMSG_FIRSTHDR(&message); h != nullptr; h = CMSG_NXTHDR(&message, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    int fd = -1;
    std::memcpy(&fd, CMSG_DATA(h), sizeof(int));
    return UniqueFd(fd);
  }
  return make_error(Errc::kProtocol, "recvmsg(SCM_RIGHTS): no fd came with the offer");
}

}  // namespace kvtier::kernels::cuda::testing
