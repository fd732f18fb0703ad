#include "kvtier/base/received_fds.hpp"

#include <cstring>

namespace kvtier {

std::vector<UniqueFd> received_fds(const msghdr& msg) {
  std::vector<UniqueFd> fds;
  // CMSG_NXTHDR takes a non-const msghdr but only reads it.
  auto& readable = const_cast<msghdr&>(msg);
  for (cmsghdr* c = CMSG_FIRSTHDR(&readable); c != nullptr; c = CMSG_NXTHDR(&readable, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.emplace_back(fd);
    }
  }
  return fds;
}

}  // namespace kvtier
