// kvtierd under systemd's protocols, without systemd: sd_notify messages (READY, STATUS,
// WATCHDOG, STOPPING) on a NOTIFY_SOCKET the test owns, and socket activation (LISTEN_FDS).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>

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

}  // namespace
}  // namespace kvtier::testing
