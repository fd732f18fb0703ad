// UniqueFd: the one owner of an fd closes it on destruction and reset, and moves hand it over.
#include "kvtier/base/unique_fd.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <utility>

namespace kvtier {
namespace {

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) >= 0; }

// A fresh fd to own (the read end of a pipe whose write end is closed at once).
int fresh_fd() {
  int ends[2] = {-1, -1};
  if (::pipe2(ends, O_CLOEXEC) != 0) return -1;
  ::close(ends[1]);
  return ends[0];
}

TEST(UniqueFd, ClosesItsFdOnDestruction) {
  const int fd = fresh_fd();
  ASSERT_GE(fd, 0);
  { UniqueFd owner(fd); }
  EXPECT_FALSE(is_open(fd));
}

TEST(UniqueFd, AMoveHandsOwnershipOver) {
  const int fd = fresh_fd();
  ASSERT_GE(fd, 0);
  UniqueFd target;
  {
    UniqueFd source(fd);
    target = std::move(source);
    EXPECT_FALSE(source.valid());  // NOLINT(bugprone-use-after-move): the
                                   // contract under test
  }
  EXPECT_TRUE(is_open(fd));
  EXPECT_EQ(target.get(), fd);
}

TEST(UniqueFd, ReleaseGivesUpOwnershipWithoutClosing) {
  const int fd = fresh_fd();
  ASSERT_GE(fd, 0);
  {
    UniqueFd owner(fd);
    EXPECT_EQ(owner.release(), fd);
  }
  EXPECT_TRUE(is_open(fd));
  ::close(fd);
}

TEST(UniqueFd, ResetClosesTheOldFdAndOwnsTheNewOne) {
  const int first = fresh_fd(), second = fresh_fd();
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  UniqueFd owner(first);
  owner.reset(second);
  EXPECT_FALSE(is_open(first));
  EXPECT_EQ(owner.get(), second);
}

}  // namespace
}  // namespace kvtier
