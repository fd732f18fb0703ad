// OwnedFd: the single owner of a file descriptor inside kernels/ (a cuMem POSIX-fd export), closed
// on destruction. kernels/ depends on std and the error types only (DESIGN §2 module table), so it
// cannot use shm::UniqueFd; this is the same contract, minus duplicate(). Hand the fd to a UniqueFd
// with release() where both meet.
// Thread-safety: like any value; one owner, moved not shared.
#pragma once

namespace kvtier::kernels::cuda {

class OwnedFd {
 public:
  OwnedFd() noexcept = default;
  explicit OwnedFd(int fd) noexcept : fd_(fd) {}
  OwnedFd(OwnedFd&& other) noexcept : fd_(other.release()) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd() { reset(); }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }
  // Gives up ownership without closing.
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes the current fd (if any) and owns `fd` instead.
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

}  // namespace kvtier::kernels::cuda
