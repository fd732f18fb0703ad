// kvtierd under systemd's protocols, without systemd: sd_notify messages (READY, STATUS,
// WATCHDOG, STOPPING) on a NOTIFY_SOCKET the test owns, and socket activation (LISTEN_FDS).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "process.hpp"

namespace kvtier::testing {
namespace {

using ::testing::HasSubstr;

int bound_socket(const std::filesystem::path& path, int type) {
  const int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.native().copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return -1;
  if (type == SOCK_STREAM && ::listen(fd, 16) != 0) return -1;
  return fd;
}

// Collects notify datagrams until one contains `text` (or the timeout).
bool receive_until(int fd, const std::string& text, std::string& all, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) all.append(buf, static_cast<std::size_t>(n)).append("\n");
    if (all.find(text) != std::string::npos) return true;
  }
  return false;
}

class SystemdProtocol : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvtier-sd-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<std::string> daemon_argv() const {
    return {KVTIER_TEST_KVTIERD, "--set", "daemon.runtime_dir=" + dir_.string(), "--set",
            "daemon.shm_prefix=sd" + std::to_string(::getpid())};
  }
  std::filesystem::path dir_;
};

TEST_F(SystemdProtocol, NotifiesReadyStatusWatchdogAndStopping) {
  const auto notify_path = dir_ / "notify";
  const int notify = bound_socket(notify_path, SOCK_DGRAM);
  ASSERT_GE(notify, 0);
  ChildProcess daemon = ChildProcess::spawn(daemon_argv(), dir_ / "kvtierd.log", std::nullopt, [&] {
    ::setenv("NOTIFY_SOCKET", notify_path.c_str(), 1);
    ::setenv("WATCHDOG_USEC", "200000", 1);
  });
  std::string seen;
  ASSERT_TRUE(receive_until(notify, "READY=1", seen, std::chrono::seconds(10))) << seen;
  EXPECT_THAT(seen, HasSubstr("STATUS=listening on " + (dir_ / "kvtierd.sock").string()));
  ASSERT_TRUE(receive_until(notify, "WATCHDOG=1", seen, std::chrono::seconds(5))) << seen;

  const CommandResult client = run_command({KVTIER_TEST_WORKLOAD, "--socket", (dir_ / "kvtierd.sock").string(),
                                            "--steps", "5", "--sequences", "1"});
  EXPECT_EQ(client.exit_code, 0) << client.out;
  ASSERT_TRUE(receive_until(notify, "STATUS=serving 1 engine client", seen, std::chrono::seconds(5))) << seen;

  daemon.signal(SIGTERM);
  ASSERT_TRUE(receive_until(notify, "STOPPING=1", seen, std::chrono::seconds(10))) << seen;
  EXPECT_EQ(daemon.wait(std::chrono::seconds(10)), 0);
  ::close(notify);
}

TEST_F(SystemdProtocol, UsesTheSocketSystemdPassesAndLeavesItInPlace) {
  const auto path = dir_ / "activated.sock";
  const int listener = bound_socket(path, SOCK_STREAM);
  ASSERT_GE(listener, 0);
  std::vector<std::string> argv = daemon_argv();
  ChildProcess daemon = ChildProcess::spawn(argv, dir_ / "kvtierd.log", std::nullopt, [&] {
    // SD_LISTEN_FDS_START; dup2 clears close-on-exec, but is a no-op when listener is 3 already.
    if (listener == 3) {
      ::fcntl(3, F_SETFD, 0);
    } else {
      ::dup2(listener, 3);
    }
    ::setenv("LISTEN_FDS", "1", 1);
    ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
  });
  ::close(listener);
  EXPECT_TRUE(eventually([&] {
    return run_command({KVTIER_TEST_KVTIERCTL, "--socket", path.string(), "version"}).exit_code == 0;
  }));
  // It did not bind its own socket in the runtime directory.
  EXPECT_FALSE(std::filesystem::exists(dir_ / "kvtierd.sock"));
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(std::chrono::seconds(10)), 0);
  EXPECT_TRUE(std::filesystem::exists(path));  // the socket belongs to systemd
}

// Receives notify datagrams until one stores an fd whose FDNAME contains `kind` (e.g. ".pool.");
// returns that name and the fd (the caller owns it), or an empty name and -1 on timeout.
std::pair<std::string, int> receive_stored_fd(int notify, const std::string& kind, std::string& all,
                                              std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{notify, POLLIN, 0};
    if (::poll(&pfd, 1, 50) <= 0) continue;
    char buf[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    iovec iov{buf, sizeof(buf)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(notify, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0) continue;
    const std::string text(buf, static_cast<std::size_t>(n));
    all += text + "\n";
    int fd = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
    }
    const auto at = text.find("FDNAME=");
    if (fd >= 0 && text.find("FDSTORE=1") != std::string::npos && at != std::string::npos &&
        text.find(kind, at) != std::string::npos) {
      return {text.substr(at + 7, text.find('\n', at) == std::string::npos ? std::string::npos
                                                                            : text.find('\n', at) - at - 7),
              fd};
    }
    if (fd >= 0) ::close(fd);
  }
  return {"", -1};
}

// Under systemd a restarted daemon gets its predecessor's pool fds from the fd store even when
// the names are gone from /dev/shm (RemoveIPC=yes, a cleaner): the client reattaches to them.
TEST_F(SystemdProtocol, ThePoolGoesToTheFdStoreAndASuccessorAdoptsItFromThereWithoutItsName) {
  const auto notify_path = dir_ / "notify";
  const int notify = bound_socket(notify_path, SOCK_DGRAM);
  ASSERT_GE(notify, 0);
  const auto with_notify = [&] { ::setenv("NOTIFY_SOCKET", notify_path.c_str(), 1); };
  std::vector<std::string> argv = daemon_argv();
  argv.insert(argv.end(), {"--set", "limits.orphan_grace_ms=200"});
  ChildProcess first = ChildProcess::spawn(argv, dir_ / "first.log", std::nullopt, with_notify);
  std::string seen;
  ASSERT_TRUE(receive_until(notify, "READY=1", seen, std::chrono::seconds(10))) << seen;
  ChildProcess owner = ChildProcess::spawn(
      {KVTIER_TEST_WORKLOAD, "--socket", (dir_ / "kvtierd.sock").string(), "--name", "owner", "--steps", "128",
       "--pause-every", "64", "--beta", "0.25", "--window", "16", "--interval", "16", "--expect-exact"},
      dir_ / "owner.log");
  const auto [name, stored] = receive_stored_fd(notify, ".pool.", seen, std::chrono::seconds(10));
  ASSERT_GE(stored, 0) << seen;
  ASSERT_TRUE(wait_for_line(dir_ / "owner.log", "paused step=64"));

  first.signal(SIGKILL);
  ASSERT_TRUE(first.wait(std::chrono::seconds(10)).has_value());
  ASSERT_EQ(::shm_unlink(("/" + name).c_str()), 0) << name;  // only the fd store has it now
  ChildProcess second = ChildProcess::spawn(argv, dir_ / "second.log", std::nullopt, [&] {
    with_notify();
    if (stored == 3) {
      ::fcntl(3, F_SETFD, 0);
    } else {
      ::dup2(stored, 3);
    }
    ::setenv("LISTEN_FDS", "1", 1);
    ::setenv("LISTEN_FDNAMES", name.c_str(), 1);
    ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
  });
  ::close(stored);
  ASSERT_TRUE(receive_until(notify, "READY=1", seen, std::chrono::seconds(10))) << seen;
  // Paused, the owner makes no reattachment attempt; after the backoff's bound (1 s, PROTOCOL.md
  // §4 "Reattachment") one is due at its first poll.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  owner.signal(SIGUSR1);
  const auto code = owner.wait(std::chrono::seconds(60));
  EXPECT_EQ(code, 0) << read_log(dir_ / "owner.log");
  EXPECT_THAT(read_log(dir_ / "owner.log"), HasSubstr("reattachments=1"));
  const std::string log = read_log(dir_ / "second.log");
  EXPECT_THAT(log, HasSubstr("by=fd_store"));
  EXPECT_THAT(log, HasSubstr("event=client_reattached"));
  // Reclaimed once its process exited: the store lets go of it too.
  EXPECT_TRUE(receive_until(notify, "FDSTOREREMOVE=1\nFDNAME=" + name, seen, std::chrono::seconds(10))) << seen;
  second.signal(SIGTERM);
  EXPECT_EQ(second.wait(std::chrono::seconds(10)), 0);
  ::close(notify);
}

}  // namespace
}  // namespace kvtier::testing
