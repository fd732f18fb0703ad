#include "metrics_server.hpp"

#include <sys/socket.h>

#include <future>
#include <utility>

#include <asio/post.hpp>
#include <httplib.h>

namespace kvtier::daemon {

MetricsServer::MetricsServer(asio::io_context& control, Collect collect)
    : control_(control), collect_(std::move(collect)), http_(std::make_unique<httplib::Server>()) {}

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const config::ListenAddress& address,
                                                            asio::io_context& control, Collect collect,
                                                            spdlog::logger& log) {
  std::unique_ptr<MetricsServer> server(new MetricsServer(control, std::move(collect)));
  httplib::Server& http = *server->http_;
  // One worker: scrapes are rare and each is one snapshot; more would only queue on the control thread.
  http.new_task_queue = [] { return new httplib::ThreadPool(1); };
  http.set_read_timeout(5, 0);
  http.set_write_timeout(5, 0);
  http.set_payload_max_length(4096);  // requests carry no body
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which would let a second daemon
  // share the port (and half the scrapes) instead of failing to start.
  http.set_socket_options([](int fd) {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http.Get("/metrics", [raw = server.get()](const httplib::Request&, httplib::Response& response) {
    if (auto metrics = raw->collect()) {
      response.set_content(render_metrics(*metrics), "text/plain; version=0.0.4; charset=utf-8");
    } else {
      response.status = 503;
      response.set_content("kvtierd did not collect its metrics in time (stopping or overloaded)\n", "text/plain");
    }
  });
  const bool v6 = address.host.find(':') != std::string::npos;
  if (v6) http.set_address_family(AF_INET6);
  int port = address.port;
  if (port == 0) {
    port = http.bind_to_any_port(address.host);
  } else if (!http.bind_to_port(address.host, port)) {
    port = -1;
  }
  const std::string host = v6 ? "[" + address.host + "]" : address.host;
  if (port <= 0) {
    return make_error(Errc::kOsError, "metrics.listen " + host + ":" + std::to_string(address.port) +
                                          ": cannot bind (address in use or not local)");
  }
  server->address_ = host + ":" + std::to_string(port);
  server->thread_ = std::jthread([raw = server.get(), &log] {
    if (!raw->http_->listen_after_bind()) log.warn("event=metrics_stopped address={}", raw->address_);
    raw->listen_returned_ = true;
  });
  // cpp-httplib's stop() does nothing until the serving loop has begun, so a daemon stopped right
  // after starting would wait forever in the destructor's join: return only once it runs.
  while (!http.is_running() && !server->listen_returned_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  log.info("event=metrics_listening address={} path=/metrics", server->address_);
  return server;
}

MetricsServer::~MetricsServer() {
  http_->stop();
  if (thread_.joinable()) thread_.join();
}

std::optional<NodeMetrics> MetricsServer::collect() {
  auto promise = std::make_shared<std::promise<NodeMetrics>>();
  auto future = promise->get_future();
  asio::post(control_, [this, promise] {
    collect_([promise](NodeMetrics metrics) { promise->set_value(std::move(metrics)); });
  });
  if (future.wait_for(kCollectTimeout) != std::future_status::ready) return std::nullopt;
  return future.get();
}

}  // namespace kvtier::daemon
