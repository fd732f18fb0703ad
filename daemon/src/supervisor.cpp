#include "supervisor.hpp"

#include <cstdint>
#include <string>

#include <systemd/sd-daemon.h>

namespace kvtier::daemon {

Supervisor::Supervisor() {
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
    watchdog_interval_ = std::chrono::microseconds(usec / 2);
  }
}

void Supervisor::ready(std::string_view status) {
  const std::string message = "READY=1\nSTATUS=" + std::string(status);
  sd_notify(0, message.c_str());
}

void Supervisor::status(std::string_view status) {
  const std::string message = "STATUS=" + std::string(status);
  sd_notify(0, message.c_str());
}

void Supervisor::stopping() { sd_notify(0, "STOPPING=1\nSTATUS=draining"); }

void Supervisor::watchdog() { sd_notify(0, "WATCHDOG=1"); }

void Supervisor::store_fd(std::string_view name, int fd) {
  // FDPOLL=0: a shm file is no pollable object that could report POLLHUP.
  const std::string message = "FDSTORE=1\nFDPOLL=0\nFDNAME=" + std::string(name);
  sd_pid_notify_with_fds(0, 0, message.c_str(), &fd, 1);
}

void Supervisor::remove_fd(std::string_view name) {
  const std::string message = "FDSTOREREMOVE=1\nFDNAME=" + std::string(name);
  sd_notify(0, message.c_str());
}

}  // namespace kvtier::daemon
