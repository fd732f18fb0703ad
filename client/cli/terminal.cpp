#include "terminal.hpp"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace kvtier::cli {
namespace {

// A signal handler can only reach static storage; this flag is all it touches.
volatile sig_atomic_t g_signal = 0;

void on_signal(int signo) { g_signal = signo; }

void install(int signo, void (*handler)(int)) {
  struct sigaction action{};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: poll() returns EINTR and the loop sees the flag
  ::sigaction(signo, &action, nullptr);
}

void write_all(const char* text) {
  std::fputs(text, stdout);
  std::fflush(stdout);
}

}  // namespace

TerminalSession::TerminalSession() {
  g_signal = 0;
  install(SIGINT, on_signal);
  install(SIGTERM, on_signal);
  if (::isatty(STDIN_FILENO) == 1) {
    termios mode{};
    if (::tcgetattr(STDIN_FILENO, &mode) == 0) {
      saved_ = mode;
      mode.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
      mode.c_cc[VMIN] = 0;
      mode.c_cc[VTIME] = 0;
      ::tcsetattr(STDIN_FILENO, TCSANOW, &mode);
    }
  }
  stdout_tty_ = ::isatty(STDOUT_FILENO) == 1;
  if (stdout_tty_) write_all("\x1b[?25l");  // hide the cursor
}

TerminalSession::~TerminalSession() {
  if (stdout_tty_) write_all("\x1b[?25h\n");  // show it again, below the last frame
  if (saved_) ::tcsetattr(STDIN_FILENO, TCSANOW, &*saved_);
  install(SIGINT, SIG_DFL);
  install(SIGTERM, SIG_DFL);
}

int TerminalSession::signal_received() const { return g_signal; }

std::optional<char> TerminalSession::wait_key(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (g_signal == 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd in{STDIN_FILENO, POLLIN, 0};
    const int ready = ::poll(stdin_open_ ? &in : nullptr, stdin_open_ ? 1 : 0, static_cast<int>(left.count()));
    if (ready < 0) {
      if (errno == EINTR) continue;  // a signal (the loop checks) or a stop/continue
      return std::nullopt;
    }
    if (ready == 0) return std::nullopt;
    char key = 0;
    const ssize_t n = ::read(STDIN_FILENO, &key, 1);
    if (n == 1) return key;
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) stdin_open_ = false;  // its end: stop reading it
  }
  return std::nullopt;
}

}  // namespace kvtier::cli
