#include "daemon.hpp"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>

#include "data_plane.hpp"
#include "listener.hpp"
#include "metrics_server.hpp"
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

// pools.ddr_bytes_total when the configuration leaves it 0: the smaller of the shm filesystem's
// size (no pool can outgrow it) and half the machine's memory (the rest is the engines'), with
// what it was derived from. nullopt when neither can be read.
std::optional<std::uint64_t> derived_ddr_bytes_total(std::string& basis) {
  std::optional<std::uint64_t> shm, memory;
  if (struct statvfs fs{}; ::statvfs("/dev/shm", &fs) == 0) shm = std::uint64_t{fs.f_blocks} * fs.f_frsize;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    std::uint64_t kib = 0;
    meminfo >> kib;
    if (key == "MemTotal:") memory = kib * 1024;
    meminfo.ignore(256, '\n');
  }
  basis = "/dev/shm " + (shm ? std::to_string(*shm) : std::string("?")) + " bytes, half of MemTotal " +
          (memory ? std::to_string(*memory / 2) : std::string("?")) + " bytes";
  if (!shm && !memory) return std::nullopt;
  return std::min(shm.value_or(UINT64_MAX), memory ? *memory / 2 : UINT64_MAX);
}

void feed_watchdog(asio::steady_timer& timer, Supervisor& supervisor, std::chrono::microseconds interval) {
  supervisor.watchdog();
  timer.expires_after(interval);
  timer.async_wait([&timer, &supervisor, interval](std::error_code ec) {
    if (!ec) feed_watchdog(timer, supervisor, interval);
  });
}

}  // namespace

Status run_daemon(const config::DaemonConfig& configured, spdlog::logger& log) {
  config::DaemonConfig config = configured;
  if (config.pools.ddr_bytes_total == 0) {
    std::string basis;
    if (auto derived = derived_ddr_bytes_total(basis)) config.pools.ddr_bytes_total = *derived;
    log.info("event=ddr_budget pools.ddr_bytes_total={} derived_from=\"{}\"", config.pools.ddr_bytes_total, basis);
  }
  // Sequences that take the configured defaults would each be refused: refuse the config now.
  if (auto defaults = tier_defaults(config.tiering, 0); !defaults) {
    log.error("event=bad_config {}", to_string(defaults.error()));
    return tl::unexpected(defaults.error());
  }
  asio::io_context io;
  Supervisor supervisor;
  const std::uint64_t epoch = new_epoch();
  bool activated = false;
  auto passed = take_passed_fds();
  if (!passed) {
    log.error("event=listen_failed {}", to_string(passed.error()));
    return tl::unexpected(passed.error());
  }
  auto acceptor = open_listener(io, ListenerOptions{config::socket_path(config)}, passed->socket, &activated);
  if (!acceptor) {
    log.error("event=listen_failed {}", to_string(acceptor.error()));
    return tl::unexpected(acceptor.error());
  }

  // One named logger per component (STYLE.md 15), on the sink and level main() chose; `log` itself
  // speaks for the daemon's life cycle.
  const auto data_plane_log = log.clone("kvtierd.data_plane");
  const auto server_log = log.clone("kvtierd.server");
  const auto metrics_log = log.clone("kvtierd.metrics");
  DataPlane data_plane(io, config, *data_plane_log);
  Server server(io, config, data_plane, supervisor, *server_log, epoch);
  data_plane.start([&server](std::uint32_t client_id, const Error& error) { server.fail_client(client_id, error); },
                   [&server](Event event) { server.record_event(std::move(event)); });
  server.start(std::move(*acceptor), std::move(passed->stored));
  std::unique_ptr<MetricsServer> metrics;
  if (auto address = config::parse_listen_address(config.metrics.listen)) {  // validated: empty = off
    auto started = MetricsServer::start(
        *address, io, [&server](std::function<void(NodeMetrics)> done) { server.collect_metrics(std::move(done)); },
        *metrics_log);
    if (!started) {
      metrics_log->error("event=metrics_failed {}", to_string(started.error()));
      server.stop();
      data_plane.stop();
      if (!activated) ::unlink(config::socket_path(config).c_str());
      return tl::unexpected(started.error());
    }
    metrics = std::move(*started);
    server.set_metrics_address(metrics->address());
  }

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
