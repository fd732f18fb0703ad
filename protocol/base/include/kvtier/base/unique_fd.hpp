// UniqueFd: the single owner of a file descriptor; closes it on destruction. The one fd owner of
// every module (shm segments, sockets, cuMem POSIX-fd exports in kernels/cuda), so it lives in
// the base target kvtier_base beside Result.
// Thread-safety: like any value; one owner, moved not shared.
#pragma once

#include "kvtier/base/error.hpp"

namespace kvtier {

class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  // A close-on-exec duplicate of `fd` (which stays owned by the caller). kOsError on failure.
  static Result<UniqueFd> duplicate(int fd);

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

}  // namespace kvtier
