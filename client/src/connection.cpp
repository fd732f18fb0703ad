#include "connection.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "kvtier/base/received_fds.hpp"

namespace kvtier::client {
namespace {
constexpr int kMaxFdsPerMessage = 4;
}  // namespace

Result<Connection> Connection::connect(const std::string& socket_path) {
  sockaddr_un addr{};
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return make_error(Errc::kInvalidArgument, "socket path too long: " + socket_path);
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return os_error("socket");
  addr.sun_family = AF_UNIX;
  socket_path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    return make_error(Errc::kUnavailable, "cannot connect to kvtierd at " + socket_path + ": " + std::strerror(err));
  }
  return Connection(std::move(fd));
}

Status Connection::send(capnp::MessageBuilder& message) { return send(message, {}); }

Status Connection::send(capnp::MessageBuilder& message, std::span<const int> fds) {
  auto frame = protocol::encode_frame(message);
  if (!frame) return tl::unexpected(frame.error());
  if (fds.empty()) return send_bytes(frame->data(), frame->size());
  if (fds.size() > static_cast<std::size_t>(kMaxFdsPerMessage)) return make_error(Errc::kInvalidArgument, "too many fds for one frame");
  // The fds ride on the frame's first byte; the rest follows as plain stream bytes.
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)> control{};
  iovec iov{frame->data(), 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  ssize_t n = 0;
  do {
    n = ::sendmsg(socket_.get(), &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != 1) return make_error(Errc::kUnavailable, std::string("daemon connection lost: ") + std::strerror(errno));
  return send_bytes(frame->data() + 1, frame->size() - 1);
}

Status Connection::send_bytes(const std::byte* data, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::send(socket_.get(), data + done, size - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error(Errc::kUnavailable, std::string("daemon connection lost: ") + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
  return {};
}

Status Connection::read_some(std::chrono::milliseconds timeout) {
  pollfd pfd{socket_.get(), POLLIN, 0};
  int ready = 0;
  do {
    ready = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
  } while (ready < 0 && errno == EINTR);
  if (ready < 0) return os_error("poll");
  if (ready == 0) return make_error(Errc::kUnavailable, "daemon did not answer within " + std::to_string(timeout.count()) + " ms");

  std::array<std::byte, 16 * 1024> buf;
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)> control;
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n = 0;
  do {
    n = ::recvmsg(socket_.get(), &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return make_error(Errc::kUnavailable, std::string("daemon connection lost: ") + std::strerror(errno));
  if (n == 0) return make_error(Errc::kUnavailable, "daemon closed the connection");
  for (UniqueFd& fd : received_fds(msg)) fds_.push_back(std::move(fd));
  if ((msg.msg_flags & MSG_CTRUNC) != 0) return make_error(Errc::kProtocol, "daemon passed more fds than expected");
  return decoder_.feed(std::span(buf.data(), static_cast<std::size_t>(n)));
}

Result<protocol::MessageIn> Connection::receive(std::chrono::milliseconds timeout) {
  for (;;) {
    if (auto frame = decoder_.next_frame()) return protocol::read_message(std::move(*frame));
    if (auto ok = read_some(timeout); !ok) return tl::unexpected(ok.error());
  }
}

Result<UniqueFd> Connection::take_fd() {
  if (fds_.empty()) return make_error(Errc::kProtocol, "daemon reply came without its file descriptor");
  UniqueFd fd = std::move(fds_.front());
  fds_.pop_front();
  return fd;
}

}  // namespace kvtier::client
