// Supervisor: what kvtierd tells systemd (sd_notify READY, STATUS, STOPPING, WATCHDOG).
//
// Without NOTIFY_SOCKET in the environment (not run by systemd) every call is a no-op.
// Thread-safety: call from the control-plane thread only.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace kvtier::daemon {

class Supervisor {
 public:
  Supervisor();

  void ready(std::string_view status);
  void status(std::string_view status);
  void stopping();
  void watchdog();
  // The file descriptor store (FileDescriptorStoreMax= in the unit): keeps `fd` under `name`
  // for the next start of the service, until remove_fd(name).
  void store_fd(std::string_view name, int fd);
  void remove_fd(std::string_view name);

  // Half of the service's WatchdogSec when systemd asked for keep-alives, else nullopt.
  std::optional<std::chrono::microseconds> watchdog_interval() const { return watchdog_interval_; }

 private:
  std::optional<std::chrono::microseconds> watchdog_interval_;
};

}  // namespace kvtier::daemon
