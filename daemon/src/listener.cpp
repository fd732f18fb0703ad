#include "listener.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <system_error>

#include <systemd/sd-daemon.h>

namespace kvtier::daemon {
namespace fs = std::filesystem;
using Acceptor = asio::local::stream_protocol::acceptor;

Status check_runtime_dir(const fs::path& dir) {
  if (::mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return os_error("cannot create runtime dir " + dir.string());
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return os_error("cannot stat runtime dir " + dir.string());
  if (!S_ISDIR(st.st_mode)) {
    return make_error(Errc::kPermissionDenied, "runtime dir " + dir.string() + " is not a directory");
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return make_error(Errc::kPermissionDenied, "runtime dir " + dir.string() + " is owned by uid " +
                                                   std::to_string(st.st_uid) + ", not by us (uid " +
                                                   std::to_string(::geteuid()) + ")");
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    return make_error(Errc::kPermissionDenied, "runtime dir " + dir.string() + " is writable by others");
  }
  return {};
}

namespace {

// True when a daemon already accepts on `path`.
bool socket_is_live(const fs::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.native().copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  const bool live = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return live;
}

}  // namespace

Result<PassedFds> take_passed_fds() {
  PassedFds out;
  char** names = nullptr;
  const int passed = sd_listen_fds_with_names(1, &names);
  for (int i = 0; i < std::max(passed, 0); ++i) {
    const int fd = SD_LISTEN_FDS_START + i;
    std::string name = names != nullptr && names[i] != nullptr ? names[i] : "";
    if (sd_is_socket_unix(fd, SOCK_STREAM, 1, nullptr, 0) > 0) {
      if (out.socket != -1) {
        ::close(fd);
        out.socket = -2;  // reported below, once every fd has been taken
        continue;
      }
      out.socket = fd;
    } else {
      out.stored.emplace_back(std::move(name), UniqueFd(fd));
    }
  }
  if (names != nullptr) {
    for (int i = 0; i < passed; ++i) std::free(names[i]);
    std::free(names);
  }
  if (out.socket == -2) return make_error(Errc::kInvalidArgument, "systemd passed more than one listening socket");
  return out;
}

Result<Acceptor> open_listener(asio::io_context& io, const ListenerOptions& options, int passed_socket,
                               bool* socket_activated) {
  *socket_activated = false;
  if (passed_socket >= 0) {
    *socket_activated = true;
    std::error_code ec;
    Acceptor acceptor(io);
    acceptor.assign(asio::local::stream_protocol(), passed_socket, ec);
    if (ec) return make_error(Errc::kOsError, "cannot adopt systemd socket: " + ec.message());
    return acceptor;
  }

  const fs::path& path = options.socket_path;
  if (path.native().size() >= sizeof(sockaddr_un::sun_path)) {
    return make_error(Errc::kInvalidArgument, "socket path too long: " + path.string());
  }
  if (auto dir = check_runtime_dir(path.parent_path()); !dir) return tl::unexpected(dir.error());
  if (fs::exists(path)) {
    if (socket_is_live(path)) {
      return make_error(Errc::kBadState, "another kvtierd already listens on " + path.string());
    }
    ::unlink(path.c_str());
  }
  std::error_code ec;
  Acceptor acceptor(io);
  acceptor.open(asio::local::stream_protocol(), ec);
  if (!ec) acceptor.bind(asio::local::stream_protocol::endpoint(path.string()), ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return make_error(Errc::kOsError, "cannot listen on " + path.string() + ": " + ec.message());
  if (::chmod(path.c_str(), options.socket_mode) != 0) return os_error("chmod " + path.string());
  return acceptor;
}

}  // namespace kvtier::daemon
