// UniqueFd (unique_fd.hpp).
#include "kvtier/base/unique_fd.hpp"

#include <fcntl.h>
#include <unistd.h>

namespace kvtier {

Result<UniqueFd> UniqueFd::duplicate(int fd) {
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return os_error("fcntl(F_DUPFD_CLOEXEC)");
  return UniqueFd(copy);
}

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0 && fd_ != fd) {
    // Linux closes the fd even when close() reports EINTR; retrying could close a reused fd.
    ::close(fd_);
  }
  fd_ = fd;
}

}  // namespace kvtier
