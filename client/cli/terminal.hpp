// The terminal while `kvtierctl top` runs: keys read one at a time without echo, the cursor
// hidden, and everything restored on the way out, also after SIGINT or SIGTERM.
//
// On construction: when stdin is a TTY its termios is saved and switched to non-canonical,
// no-echo mode (ICANON and ECHO off, VMIN 0, VTIME 0); when stdout is a TTY the cursor is hidden.
// SIGINT and SIGTERM set a flag instead of ending the process, so the destructor always runs.
// When stdin is not a TTY, keys are read from it as they come (a 'q' line quits); at its end
// kvtierctl just waits (a signal still ends it).
//
// Thread-safety: one per process, on the main thread (signal dispositions are process-wide).
#pragma once

#include <termios.h>

#include <chrono>
#include <optional>

namespace kvtier::cli {

class TerminalSession {
 public:
  TerminalSession();
  ~TerminalSession();
  TerminalSession(const TerminalSession&) = delete;
  TerminalSession& operator=(const TerminalSession&) = delete;

  bool stdout_is_terminal() const { return stdout_tty_; }
  // The key pressed within `timeout` (nullopt: none), returning early when a signal arrived.
  std::optional<char> wait_key(std::chrono::milliseconds timeout);
  // SIGINT or SIGTERM since construction; 0: none.
  int signal_received() const;

 private:
  std::optional<termios> saved_;  // stdin's mode before, when it is a TTY
  bool stdout_tty_ = false;
  bool stdin_open_ = true;  // false after stdin's end
};

}  // namespace kvtier::cli
