// Test support: real child processes (kvtierd, kvtier-workload, kvtierctl, the C ABI test) and
// a per-test daemon in its own runtime directory and shm prefix, so `ctest -j` is safe.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kvtier::testing {

// The binaries the tests start: where CMake built them, unless $KVTIER_TEST_BIN_DIR names a
// directory holding them all (tests/gpu/device_check.sh runs prebuilt copies on a GPU machine).
std::string test_binary(const char* built_path);
#define KVTIER_TEST_KVTIERD ::kvtier::testing::test_binary(KVTIER_TEST_KVTIERD_PATH)
#define KVTIER_TEST_KVTIERCTL ::kvtier::testing::test_binary(KVTIER_TEST_KVTIERCTL_PATH)
#define KVTIER_TEST_WORKLOAD ::kvtier::testing::test_binary(KVTIER_TEST_WORKLOAD_PATH)
#define KVTIER_TEST_C_ABI ::kvtier::testing::test_binary(KVTIER_TEST_C_ABI_PATH)

// A spawned child; SIGKILLed and reaped on destruction if still running.
class ChildProcess {
 public:
  // stdout/stderr go to `log_path` when given (so a test can read them), else inherited.
  // `in_child` runs in the child between fork and exec (set environment, arrange fds).
  static ChildProcess spawn(const std::vector<std::string>& argv, const std::filesystem::path& log_path = {},
                            std::optional<uid_t> run_as = std::nullopt,
                            const std::function<void()>& in_child = {});
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  void signal(int signo) const;
  // Exit status (0-255), 128+signal when killed, nullopt on timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  bool running();

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  std::optional<int> status_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

// Runs a command to completion (with a timeout) and captures its output.
CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Polls `condition` every `poll` (20 ms) until true or `timeout`, which only ends a stuck run.
template <class Fn>
bool eventually(Fn&& condition, std::chrono::milliseconds timeout = std::chrono::seconds(10),
                std::chrono::microseconds poll = std::chrono::milliseconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    ::usleep(static_cast<useconds_t>(poll.count()));
  }
  return condition();
}

// What a child wrote to its log so far.
std::string read_log(const std::filesystem::path& log);

// Waits until a kvtier-workload writing to `log` printed `line` (e.g. "paused step=32" with
// --pause-every, "holding name=N" with --hold). The bound is generous: it only ends a test whose
// workload is stuck, it decides nothing.
bool wait_for_line(const std::filesystem::path& log, const std::string& line,
                   std::chrono::milliseconds limit = std::chrono::seconds(120));

// A real kvtierd for one test: unique runtime dir under /tmp and unique shm prefix.
class DaemonUnderTest {
 public:
  explicit DaemonUnderTest(const std::string& test_name, std::vector<std::string> extra_args = {});
  // Stops the daemon (SIGTERM) if it still runs, then removes what is left under its prefix.
  ~DaemonUnderTest();
  // A successor on the same runtime directory and shm prefix, once the current daemon has
  // exited (killed or stopped by the test): log() reads the new one's log from then on.
  void start_successor(std::vector<std::string> extra_args = {});

  const std::filesystem::path& socket() const { return socket_; }
  const std::string& shm_prefix() const { return prefix_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::string log() const;
  // Names in /dev/shm that belong to this daemon.
  std::vector<std::string> segments() const;
  ChildProcess& process() { return *process_; }

  CommandResult ctl(const std::vector<std::string>& args) const;

 private:
  void start(const std::vector<std::string>& extra_args);
  std::filesystem::path log_path() const;

  std::filesystem::path dir_;
  std::filesystem::path socket_;
  std::string prefix_;
  std::optional<ChildProcess> process_;
  int generation_ = 0;  // daemons started: kvtierd.log, then kvtierd.1.log, ...
};

}  // namespace kvtier::testing
