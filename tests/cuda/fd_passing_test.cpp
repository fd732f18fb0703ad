// fd_passing.hpp, the SCM_RIGHTS hand-off the cuMem IPC test relies on: an offer arrives intact
// with a working fd, and a message without an fd is refused. Device-free, so it runs everywhere.
#include "fd_passing.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

namespace kvtier::kernels::cuda::testing {
namespace {

struct SocketPair {
  UniqueFd a, b;
};

SocketPair socket_pair() {
  int ends[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) return {};
  return {UniqueFd(ends[0]), UniqueFd(ends[1])};
}

TEST(FdPassing, AnOfferArrivesWithAWorkingCloseOnExecFd) {
  const SocketPair sockets = socket_pair();
  ASSERT_TRUE(sockets.a.valid());
  int pipe_ends[2] = {-1, -1};
  ASSERT_EQ(::pipe2(pipe_ends, O_CLOEXEC), 0);
  const UniqueFd read_end(pipe_ends[0]), write_end(pipe_ends[1]);

  const VmmOffer sent{1234, 7, 2 << 20, 99};
  ASSERT_TRUE(send_offer(sockets.a.get(), sent, write_end.get()));
  VmmOffer got;
  const auto fd = receive_offer(sockets.b.get(), got);
  ASSERT_TRUE(fd) << fd.error().message;
  EXPECT_EQ(got.exporter, sent.exporter);
  EXPECT_EQ(got.buffer, sent.buffer);
  EXPECT_EQ(got.bytes, sent.bytes);
  EXPECT_EQ(got.seed, sent.seed);
  EXPECT_NE(fd->get(), write_end.get());  // a new descriptor for the same pipe
  EXPECT_NE(::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC, 0);
  const char byte = 'k';
  ASSERT_EQ(::write(fd->get(), &byte, 1), 1);
  char back = 0;
  ASSERT_EQ(::read(read_end.get(), &back, 1), 1);
  EXPECT_EQ(back, 'k');
}

TEST(FdPassing, AnOfferWithoutAnFdIsRefused) {
  const SocketPair sockets = socket_pair();
  ASSERT_TRUE(sockets.a.valid());
  const VmmOffer sent{};
  ASSERT_EQ(::send(sockets.a.get(), &sent, sizeof(sent), MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof(sent)));
  VmmOffer got;
  const auto fd = receive_offer(sockets.b.get(), got);
  ASSERT_FALSE(fd);
  EXPECT_EQ(fd.error().code, Errc::kProtocol);
}

}  // namespace
}  // namespace kvtier::kernels::cuda::testing
