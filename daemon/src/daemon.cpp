#include "daemon.hpp"

#include <unistd.h>

#include <chrono>
#include <random>

#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>

#include "data_plane.hpp"
#include "listener.hpp"
#include "server.hpp"
#include "supervisor.hpp"
#include "tier_params.hpp"

namespace kvtier::daemon {
namespace {

std::uint64_t new_epoch() {
  std::random_device rd;
  const auto now = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  return (now ^ (std::uint64_t{rd()} << 32) ^ rd()) | 1;  // never 0 (0 means "any" to clients)
}

void feed_watchdog(asio::steady_timer& timer, Supervisor& supervisor, std::chrono::microseconds interval) {
  supervisor.watchdog();
  timer.expires_after(interval);
  timer.async_wait([&timer, &supervisor, interval](std::error_code ec) {
    if (!ec) feed_watchdog(timer, supervisor, interval);
  });
}

}  // namespace

Status run_daemon(const config::DaemonConfig& config, spdlog::logger& log) {
  // Sequences that take the configured defaults would each be refused: refuse the config now.
  if (auto defaults = tier_defaults(config.tiering, 0); !defaults) {
    log.error("event=bad_config {}", to_string(defaults.error()));
    return tl::unexpected(defaults.error());
  }
  asio::io_context io;
  Supervisor supervisor;
  const std::uint64_t epoch = new_epoch();
  bool activated = false;
  auto acceptor = open_listener(io, ListenerOptions{config::socket_path(config)}, &activated);
  if (!acceptor) {
    log.error("event=listen_failed {}", to_string(acceptor.error()));
    return tl::unexpected(acceptor.error());
  }

  DataPlane data_plane(io, config, log);
  Server server(io, config, data_plane, supervisor, log, epoch);
  data_plane.start([&server](std::uint32_t client_id, const Error& error) { server.fail_client(client_id, error); });
  server.start(std::move(*acceptor));

  asio::signal_set signals(io, SIGTERM, SIGINT);
  asio::steady_timer watchdog(io);
  signals.async_wait([&](std::error_code ec, int signo) {
    if (ec) return;
    log.info("event=shutdown signal={} clients={}", signo, server.client_count());
    supervisor.stopping();
    // Plans stop, outstanding acks are awaited, pools stay for a successor (Server).
    server.drain_and_stop([&] {
      watchdog.cancel();
      // Let the sessions' close handlers run, then leave.
      asio::post(io, [&io] { io.stop(); });
    });
  });
  if (auto interval = supervisor.watchdog_interval(); interval && config.daemon.watchdog) {
    feed_watchdog(watchdog, supervisor, *interval);
  }

  const std::string where = config::socket_path(config).string();
  log.info("event=ready socket={} socket_activated={} epoch={:016x} pid={}", where, activated, epoch, ::getpid());
  supervisor.ready("listening on " + where);
  io.run();
  data_plane.stop();
  if (!activated) ::unlink(where.c_str());
  log.info("event=stopped");
  return {};
}

}  // namespace kvtier::daemon
