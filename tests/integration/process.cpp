#include "process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kvtier::testing {

std::string test_binary(const char* built_path) {
  const char* dir = std::getenv("KVTIER_TEST_BIN_DIR");
  if (dir == nullptr || *dir == '\0') return built_path;
  return (std::filesystem::path(dir) / std::filesystem::path(built_path).filename()).string();
}

namespace fs = std::filesystem;

ChildProcess ChildProcess::spawn(const std::vector<std::string>& argv, const fs::path& log_path,
                                 std::optional<uid_t> run_as, const std::function<void()>& in_child) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    if (!log_path.empty()) {
      const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    if (run_as && (::setgid(*run_as) != 0 || ::setuid(*run_as) != 0)) ::_exit(126);
    if (in_child) in_child();
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return ChildProcess(pid);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept : pid_(other.pid_), status_(other.status_) { other.pid_ = -1; }

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !status_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

void ChildProcess::signal(int signo) const { ::kill(pid_, signo); }

std::optional<int> ChildProcess::wait(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    ::usleep(5'000);
  }
}

bool ChildProcess::running() { return !wait(std::chrono::milliseconds(0)).has_value(); }

CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  char path[] = "/tmp/kvtier-cmd-XXXXXX";
  const int fd = ::mkstemp(path);
  ::close(fd);
  CommandResult result;
  {
    ChildProcess child = ChildProcess::spawn(argv, path);
    result.exit_code = child.wait(timeout).value_or(-1);
  }
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  result.out = ss.str();
  ::unlink(path);
  return result;
}

DaemonUnderTest::DaemonUnderTest(const std::string& test_name, std::vector<std::string> extra_args) {
  char tmpl[] = "/tmp/kvtier-it-XXXXXX";
  dir_ = ::mkdtemp(tmpl);
  ::chmod(dir_.c_str(), 0755);
  socket_ = dir_ / "kvtierd.sock";
  prefix_ = "kvt-" + std::to_string(::getpid()) + "-" + test_name.substr(0, 12);
  for (auto& c : prefix_) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '-';
  }
  start(extra_args);
}

void DaemonUnderTest::start(const std::vector<std::string>& extra_args) {
  std::vector<std::string> argv = {KVTIER_TEST_KVTIERD,
                                   "--set", "daemon.runtime_dir=" + dir_.string(),
                                   "--set", "daemon.shm_prefix=" + prefix_,
                                   "--set", "daemon.log_level=debug"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  process_.reset();
  process_.emplace(ChildProcess::spawn(argv, log_path()));
  const bool up = eventually([&] { return ctl({"version"}).exit_code == 0 || !process_->running(); });
  if (!up || !process_->running()) throw std::runtime_error("kvtierd did not start: " + log());
}

void DaemonUnderTest::start_successor(std::vector<std::string> extra_args) {
  if (process_ && !process_->wait(std::chrono::seconds(30))) throw std::runtime_error("kvtierd did not exit");
  ++generation_;
  start(extra_args);
}

std::filesystem::path DaemonUnderTest::log_path() const {
  return dir_ / (generation_ == 0 ? std::string("kvtierd.log") : "kvtierd." + std::to_string(generation_) + ".log");
}

DaemonUnderTest::~DaemonUnderTest() {
  if (process_ && process_->running()) {
    process_->signal(SIGTERM);
    // A kvtierd a test leaves running must stop cleanly too (a crash while stopping would pass
    // unseen otherwise); one still draining after the stuck bound is killed.
    if (const std::optional<int> code = process_->wait(std::chrono::seconds(10))) {
      EXPECT_EQ(*code, 0) << "kvtierd exited " << *code << " on SIGTERM; its log:\n" << log();
    } else {
      process_->signal(SIGKILL);
    }
  }
  process_.reset();
  // A stopped daemon leaves its clients' pools for a successor: this test has none.
  for (const std::string& name : segments()) ::shm_unlink(("/" + name).c_str());
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

std::string DaemonUnderTest::log() const {
  std::ifstream in(log_path());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> DaemonUnderTest::segments() const {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("kvtier." + prefix_ + "-", 0) == 0) out.push_back(name);
  }
  return out;
}

CommandResult DaemonUnderTest::ctl(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {KVTIER_TEST_KVTIERCTL, "--socket", socket_.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

std::string read_log(const std::filesystem::path& log) {
  std::ifstream in(log);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool wait_for_line(const std::filesystem::path& log, const std::string& line, std::chrono::milliseconds limit) {
  return eventually([&] { return read_log(log).find(line + "\n") != std::string::npos; }, limit);
}

}  // namespace kvtier::testing
