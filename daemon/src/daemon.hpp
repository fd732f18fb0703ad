// Daemon: assembles kvtierd from its parts (listener, control-plane server, data plane,
// supervisor, signals) and runs it until SIGTERM/SIGINT. No main() here, so tests can embed it.
//
// Thread-safety: run() blocks the calling thread, which becomes the control-plane thread.
#pragma once

#include <cstdint>

#include <spdlog/logger.h>

#include "kvtier/config/config.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::daemon {

// Runs the daemon: binds (or adopts) the socket, notifies systemd READY, serves until a
// termination signal, then drains: stops accepting, closes sessions, unlinks segments.
// Errors: whatever prevents start-up (socket, runtime dir); they are also logged. `log` names the
// daemon; its components log through clones named kvtierd.server, kvtierd.data_plane and
// kvtierd.metrics.
Status run_daemon(const config::DaemonConfig& config, spdlog::logger& log);

}  // namespace kvtier::daemon
