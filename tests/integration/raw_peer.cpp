#include "raw_peer.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <stdexcept>

#include "kvtier/base/received_fds.hpp"

namespace kvtier::testing {

RawPeer::RawPeer(const std::filesystem::path& socket) {
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  socket.native().copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) throw std::runtime_error("connect failed");
}

RawPeer::~RawPeer() { ::close(fd_); }

void RawPeer::send_bytes(const std::vector<std::byte>& bytes) {
  ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
}

void RawPeer::send(capnp::MessageBuilder& message) { send_bytes(protocol::encode_frame(message).value()); }

void RawPeer::send(capnp::MessageBuilder& message, std::span<const int> fds) {
  if (fds.empty()) return send(message);
  if (fds.size() > 4) throw std::invalid_argument("RawPeer::send passes at most 4 fds");
  std::vector<std::byte> frame = protocol::encode_frame(message).value();
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * 4)> control{};
  iovec iov{frame.data(), 1};
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
  if (::sendmsg(fd_, &msg, MSG_NOSIGNAL) != 1) throw std::runtime_error("sendmsg failed");
  send_bytes(std::vector<std::byte>(frame.begin() + 1, frame.end()));
}

void RawPeer::send_hello(std::uint16_t major, std::uint16_t minor, std::uint32_t layout_version,
                         std::uint64_t fingerprint, wire::SessionRole role) {
  capnp::MallocMessageBuilder message;
  auto hello = message.initRoot<wire::ClientMessage>().initHello();
  hello.setProtocolMajor(major);
  hello.setProtocolMinor(minor);
  hello.setLayoutVersion(layout_version);
  hello.setLayoutFingerprint(fingerprint);
  hello.setClientName("raw-peer");
  hello.setRole(role);
  send(message);
}

std::optional<protocol::MessageIn> RawPeer::receive(std::chrono::milliseconds timeout) {
  for (;;) {
    if (auto frame = decoder_.next_frame()) {
      auto message = protocol::read_message(std::move(*frame));
      if (message) return std::move(*message);
      return std::nullopt;
    }
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(timeout.count())) <= 0) return std::nullopt;
    std::array<std::byte, 65536> buf;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    iovec iov{buf.data(), buf.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0) return std::nullopt;
    for (UniqueFd& fd : received_fds(msg)) fds_.push_back(std::move(fd));
    if (!decoder_.feed(std::span(buf.data(), static_cast<std::size_t>(n)))) return std::nullopt;
  }
}

int RawPeer::take_fd() {
  if (fds_.empty()) return -1;
  const int fd = fds_.front().release();
  fds_.pop_front();
  return fd;
}

bool RawPeer::closed_by_daemon(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 50) <= 0) continue;
    std::array<std::byte, 4096> buf;
    const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n <= 0) return true;
  }
  return false;
}

}  // namespace kvtier::testing
