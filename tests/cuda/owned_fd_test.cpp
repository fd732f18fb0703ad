// OwnedFd: the one owner of an fd closes it on destruction and reset, and moves hand it over.
#include "kvtier/kernels/cuda/owned_fd.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <utility>

namespace kvtier::kernels::cuda {
namespace {

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) >= 0; }

// A fresh fd to own (the read end of a pipe whose write end is closed at once).
int fresh_fd() {
  int ends[2] = {-1, -1};
  if (::pipe2(ends, O_CLOEXEC) != 0) return -1;
  ::close(ends[1]);
  return ends[0];
}

TEST(OwnedFd, ClosesItsFdOnDestruction) {
  const int fd = fresh_fd();
  ASSERT_GE(fd, 0);
  { OwnedFd owner(fd); }
  EXPECT_FALSE(is_open(fd));
}

TEST(OwnedFd, AMoveHandsOwnershipOver) {
  const int fd = fresh_fd();
  ASSERT_GE(fd, 0);
  OwnedFd target;
  {
    OwnedFd source(fd);
    target = std::move(source);
    EXPECT_FALSE(source.valid());  // NOLINT(bugprone-use-after-move): the
                                   // contract under test
  }
  EXPECT_TRUE(is_open(fd));
  EXPECT_EQ(target.get(), fd);
}

TEST(OwnedFd, ReleaseGivesUpOwnershipWithoutClosing) {
  const int fd = fresh_fd();
  ASSERT_GE(fd, 0);
  {
    OwnedFd owner(fd);
    EXPECT_EQ(owner.release(), fd);
  }
  EXPECT_TRUE(is_open(fd));
  ::close(fd);
}

TEST(OwnedFd, ResetClosesTheOldFdAndOwnsTheNewOne) {
  const int first = fresh_fd(), second = fresh_fd();
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  OwnedFd owner(first);
  owner.reset(second);
  EXPECT_FALSE(is_open(first));
  EXPECT_EQ(owner.get(), second);
}

}  // namespace
}  // namespace kvtier::kernels::cuda
