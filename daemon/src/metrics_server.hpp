// MetricsServer: serves GET /metrics (Prometheus text format) over HTTP at metrics.listen, with
// cpp-httplib (Debian libcpp-httplib-dev) on a thread of its own. A scrape posts a collection to
// the control thread and waits for it on the serving thread, up to kCollectTimeout (then 503):
// the control and data planes never wait for a scrape, they only do the collection's work (one
// DataPlane snapshot, as `kvtierctl status` does). One request is served at a time.
//
// Thread-safety: construct and destroy on the control thread; the destructor stops the server
// and joins its thread, so it must run before the io_context and the Server go away.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <asio/io_context.hpp>
#include <spdlog/logger.h>

#include "kvtier/config/config.hpp"
#include "kvtier/base/error.hpp"
#include "metrics.hpp"

namespace httplib {
class Server;
}

namespace kvtier::daemon {

class MetricsServer {
 public:
  // Runs on the control thread; calls `done` (on the control thread) with the metrics.
  using Collect = std::function<void(std::function<void(NodeMetrics)> done)>;
  static constexpr std::chrono::seconds kCollectTimeout{2};

  // Binds `address` (port 0: a free port) and starts serving. kOsError naming the address when
  // it cannot be bound.
  static Result<std::unique_ptr<MetricsServer>> start(const config::ListenAddress& address,
                                                      asio::io_context& control, Collect collect,
                                                      spdlog::logger& log);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // What was bound, "ADDRESS:PORT" ("[ADDRESS]:PORT" for IPv6), the port resolved.
  const std::string& address() const { return address_; }

 private:
  MetricsServer(asio::io_context& control, Collect collect);
  // On the serving thread: the control thread's collection, or nullopt after kCollectTimeout.
  std::optional<NodeMetrics> collect();

  asio::io_context& control_;
  Collect collect_;
  std::unique_ptr<httplib::Server> http_;
  std::string address_;
  std::atomic<bool> listen_returned_ = false;
  std::jthread thread_;
};

}  // namespace kvtier::daemon
