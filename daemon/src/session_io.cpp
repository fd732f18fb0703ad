// Session's socket I/O: frames in (recvmsg, with the fds an ExportSequence carries), frames out
// (with the fds a reply carries on its first byte), and the orderly shutdown after the last write.
#include <sys/socket.h>

#include <array>
#include <cstring>

#include <asio/write.hpp>

#include "kvtier/base/received_fds.hpp"

#include "server.hpp"
#include "session.hpp"

namespace kvtier::daemon {
namespace {

constexpr std::size_t kNothingYet = ~std::size_t{0};  // receive(): woken, but no data after all

}  // namespace

void Session::read_some() {
  // recvmsg rather than read: an ExportSequence frame carries its buffer's fd (SCM_RIGHTS).
  socket_.async_wait(asio::socket_base::wait_read, [self = shared_from_this()](std::error_code ec) {
    if (self->state_ == State::kClosed) return;
    auto n = ec ? Result<std::size_t>(0) : self->receive();
    if (!n) {
      self->fail(n.error());
      return;
    }
    if (*n == kNothingYet) return self->read_some();
    if (*n == 0) {  // EOF or reset: the client is gone or going
      self->close();
      return;
    }
    if (auto fed = self->decoder_.feed(std::span(self->read_buffer_.data(), *n)); !fed) {
      self->fail(fed.error());
      return;
    }
    while (self->state_ != State::kClosed) {
      auto frame = self->decoder_.next_frame();
      if (!frame) break;
      self->on_frame(std::move(*frame));
    }
    if (self->state_ != State::kClosed && !self->close_after_writes_) self->read_some();
  });
}

Result<std::size_t> Session::receive() {
  constexpr std::size_t kMaxFds = 2, kMaxHeld = 4;
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * kMaxFds)> control{};
  iovec iov{read_buffer_.data(), read_buffer_.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n = 0;
  do {
    n = ::recvmsg(socket_.native_handle(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return kNothingYet;
  if (n <= 0) return 0;
  for (UniqueFd& fd : received_fds(msg)) received_fds_.push_back(std::move(fd));
  if ((msg.msg_flags & MSG_CTRUNC) != 0 || received_fds_.size() > kMaxHeld) {
    return make_error(Errc::kProtocol, "too many file descriptors: a client sends one with each ExportSequence of "
                                       "an fd buffer, and nothing else");
  }
  return static_cast<std::size_t>(n);
}

void Session::send(capnp::MessageBuilder& message, std::vector<UniqueFd> fds) {
  auto frame = protocol::encode_frame(message);
  if (!frame) {
    server_.log().error("event=encode_failed client_id={} {}", client_id_, to_string(frame.error()));
    close();
    return;
  }
  outgoing_.push_back(Outgoing{std::move(*frame), std::move(fds)});
  if (!writing_) write_next();
}

void Session::send_error(const Error& error) {
  capnp::MallocMessageBuilder reply;
  auto err = reply.initRoot<wire::DaemonMessage>().initError();
  err.setCode(static_cast<std::uint32_t>(error.code));
  err.setMessage(error.message);
  send(reply);
}

void Session::write_next() {
  if (outgoing_.empty() || state_ == State::kClosed) {
    writing_ = false;
    if (close_after_writes_) close();
    return;
  }
  writing_ = true;
  Outgoing& out = outgoing_.front();
  if (!out.fds.empty()) {
    // The fds ride on the first byte; a Unix stream socket delivers them with it.
    socket_.async_wait(asio::socket_base::wait_write, [self = shared_from_this()](std::error_code ec) {
      if (ec || self->state_ == State::kClosed) return self->close();
      Outgoing& front = self->outgoing_.front();
      std::vector<int> raw;
      for (auto& fd : front.fds) raw.push_back(fd.get());
      std::vector<char> control(CMSG_SPACE(sizeof(int) * raw.size()));
      char first = static_cast<char>(front.bytes[0]);
      iovec iov{&first, 1};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control.data();
      msg.msg_controllen = control.size();
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(sizeof(int) * raw.size());
      std::memcpy(CMSG_DATA(cmsg), raw.data(), sizeof(int) * raw.size());
      const ssize_t sent = ::sendmsg(self->socket_.native_handle(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return self->write_next();
      if (sent != 1) return self->close();
      front.fds.clear();
      front.bytes.erase(front.bytes.begin());
      self->write_next();
    });
    return;
  }
  asio::async_write(socket_, asio::buffer(out.bytes), [self = shared_from_this()](std::error_code ec, std::size_t) {
    // A write that had completed when close() emptied the queue still reports success here:
    // nothing is left to pop.
    if (ec || self->state_ == State::kClosed) return self->close();
    self->outgoing_.pop_front();
    self->write_next();
  });
}

void Session::shutdown_after_writes() {
  close_after_writes_ = true;
  if (!writing_) close();
}

}  // namespace kvtier::daemon
