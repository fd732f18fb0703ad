// OwnedFd (owned_fd.hpp).
#include "kvtier/kernels/cuda/owned_fd.hpp"

#include <unistd.h>

namespace kvtier::kernels::cuda {

void OwnedFd::reset(int fd) noexcept {
  // close() is not retried on EINTR: on Linux the fd is released either way.
  if (fd_ >= 0 && fd_ != fd) (void)::close(fd_);
  fd_ = fd;
}

}  // namespace kvtier::kernels::cuda
