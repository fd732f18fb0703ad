// Server: the control plane. Accepts connections, checks peer credentials, owns the sessions,
// creates each engine client's segments (control rings, pool) and hands them to the data plane,
// enforces the configured limits, answers status requests, and reclaims everything a client held
// once its process is gone (pidfd), never earlier: a dying process may still be copying into
// its pool.
//
// Thread-safety: every member function runs on the control io_context thread. The data plane
// is reached only through DataPlane's posting API.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <capnp/message.h>
#include <spdlog/logger.h>

#include "data_plane.hpp"
#include "event_log.hpp"
#include "export_registry.hpp"
#include "metrics.hpp"
#include "kvtier/config/config.hpp"
#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/base/unique_fd.hpp"
#include "kvtier/shm/int8_pool_geometry.hpp"
#include "kvtier/shm/layout.hpp"
#include "kvtier/shm/pool_geometry.hpp"
#include "peer.hpp"
#include "predecessors.hpp"
#include "reattach_checks.hpp"
#include "request_checks.hpp"
#include "supervisor.hpp"

namespace kvtier::daemon {

class Session;

// The PlacementReply of `page` (server_admin.cpp).
void fill_placement_reply(const PlacementPage& page, capnp::MallocMessageBuilder& message);

struct EngineAttachment {
  UniqueFd control_fd;   // for the client: its control segment
  UniqueFd doorbell_fd;  // for the client: eventfd it writes when the daemon sleeps
  std::uint64_t control_bytes = 0;
};

struct PoolGrant {
  UniqueFd pool_fd;
  std::uint64_t segment_bytes = 0;
  UniqueFd int8_fd;  // invalid when no int8 pool was asked for
  std::uint64_t int8_segment_bytes = 0;
  std::uint32_t weight = 1;
};

class Server {
 public:
  Server(asio::io_context& io, const config::DaemonConfig& config, DataPlane& data_plane, Supervisor& supervisor,
         spdlog::logger& log, std::uint64_t epoch);
  ~Server();

  // Takes over what predecessors left (their clients' pools in /dev/shm and `stored`, the fds
  // systemd's fd store passed), then starts accepting on `acceptor`.
  void start(asio::local::stream_protocol::acceptor acceptor, std::vector<std::pair<std::string, UniqueFd>> stored = {});
  // SIGTERM: stops accepting and publishing plans, waits up to limits.drain_timeout_ms for the
  // outstanding acks, keeps every pool's name for a successor, closes every session, then runs
  // `done`.
  void drain_and_stop(std::function<void()> done);
  // Stops accepting and closes every session.
  void stop();

  // --- used by sessions -----------------------------------------------------------------
  const config::DaemonConfig& config() const { return config_; }
  spdlog::logger& log() { return log_; }
  std::uint64_t epoch() const { return epoch_; }
  const char* version() const;
  DataPlane& data_plane() { return data_plane_; }

  Result<EngineAttachment> attach_engine(Session& session);
  Result<PoolGrant> register_pool(Session& session, const PoolRequest& request);
  // Reattach (PROTOCOL.md §4 "Reattachment"): checks the session's claim on the pools a
  // predecessor (epoch `previous_epoch`, client `previous_client`) made for it, with the fds it
  // sent (`fds`: the pool's, then the int8 pool's), and on success takes them and hands them
  // with `sequences` to the data plane; `done` runs once the data plane restored them. Every
  // refusal leaves the orphans as they were.
  Status reattach(Session& session, const PoolRequest& request, std::uint64_t previous_epoch,
                  std::uint32_t previous_client, std::span<const UniqueFd> fds,
                  std::vector<RestoredSequence> sequences, std::function<void(Status)> done);
  void build_status(std::function<void(capnp::MallocMessageBuilder&)> reply);
  // The metrics of this daemon and every engine client (server_metrics.cpp); `done` runs on the
  // control thread after one DataPlane snapshot.
  void collect_metrics(std::function<void(NodeMetrics)> done);
  // Where metrics are served ("ADDRESS:PORT"; empty = off), for status replies.
  void set_metrics_address(std::string address) { metrics_address_ = std::move(address); }
  // A session error; the session ends because of it (its cause in kvtier_sessions_ended_total).
  void count_error(std::uint32_t client_id, Errc code);
  void on_session_closed(std::uint32_t client_id);
  // Ends a session because its data-plane traffic was bad (posted by the data plane).
  void fail_client(std::uint32_t client_id, const Error& error);

  // --- admin: events and placement (server_admin.cpp; PROTOCOL.md §4 "Events and placement") ---
  // Records one event; an empty client name is filled in from the client's session or record.
  void record_event(Event event);
  const EventLog& events() const { return events_; }
  // An EventsReply of the newest `limit` events, oldest first.
  void build_events(std::uint32_t limit, capnp::MallocMessageBuilder& message) const;
  // Asks the data plane for a page of a sequence's placement; `done` runs on the control thread.
  // kNotFound (now, `done` never runs) for a client id that is no engine client.
  Status placement(std::uint32_t client_id, std::uint32_t sequence_id, std::uint32_t first_position,
                   std::uint32_t max_runs, std::function<void(Result<PlacementPage>)> done);

  std::size_t client_count() const { return clients_.size(); }
  ExportRegistry& exports() { return exports_; }

 private:
  struct ClientRecord {
    std::shared_ptr<Session> session;
    PeerCredentials peer;
    std::unique_ptr<asio::posix::stream_descriptor> pidfd;
    std::uint64_t pool_bytes = 0;  // DDR and int8 segments
    std::uint64_t int8_bytes = 0;  // int8 segment
    std::uint32_t weight = 1;
    std::uint64_t errors = 0;
    // What status shows of a session that has closed (copied from it as it closes).
    std::string name, model_name;
    std::vector<std::string> pool_names;  // its pool segments, kept in systemd's fd store
    std::optional<shm::PoolGeometry> geometry;
    wire::KvDtype dtype = wire::KvDtype::F16;
    bool engine = false;
    bool closed = false;
    std::string end_cause;  // the error code that ends the session; empty: it disconnected
  };

  void accept_next();
  void on_accept(asio::local::stream_protocol::socket socket);
  void reclaim(std::uint32_t client_id);
  void report_status();
  // Engine clients not yet reclaimed: open, or disconnected while their process lives (their
  // pools stay theirs until it exits); both count against limits.max_clients.
  std::size_t engine_count() const;
  // Of those, the disconnected ones.
  std::size_t closing_count() const;
  // Connections not past Hello (they count against limits.max_pending_connections).
  std::size_t pending_count() const;
  std::uint64_t uptime_seconds() const;
  // What status, metrics and events show of a client: its open session's name, model and
  // geometry, or the copy the record took when the session closed.
  struct Description {
    const std::string& name;
    const std::string& model_name;
    const std::optional<shm::PoolGeometry>& geometry;
    wire::KvDtype dtype;
  };
  Description describe(const ClientRecord& record) const;
  Result<std::string> segment_name(std::uint32_t client_id, shm::SegmentKind kind) const;
  // limits.max_pool_bytes_per_client and pools.int8_bytes_total for pools of `request`.
  Status check_pool_limits(const PoolRequest& request) const;
  // Checks one claimed segment (see reattach): the orphan it names exists, `fd` is it, and it
  // belongs to `uid`. Returns the orphan's name.
  Result<std::string> check_claim(std::uint64_t previous_epoch, std::uint32_t previous_client, shm::SegmentKind kind,
                                  int fd, std::uint32_t uid) const;
  void schedule_sweep();

  asio::io_context& io_;
  const config::DaemonConfig& config_;
  DataPlane& data_plane_;
  Supervisor& supervisor_;
  spdlog::logger& log_;
  std::uint64_t epoch_;
  std::chrono::steady_clock::time_point started_;
  std::unique_ptr<asio::local::stream_protocol::acceptor> acceptor_;
  std::map<std::uint32_t, ClientRecord> clients_;
  std::uint32_t next_client_id_ = 1;
  std::uint64_t pool_bytes_used_ = 0;  // segment bytes, DDR and int8
  std::uint64_t int8_bytes_used_ = 0;  // int8 segment bytes (pools.int8_bytes_total)
  ExportRegistry exports_;
  EventLog events_;
  Predecessors predecessors_;
  asio::steady_timer sweep_timer_;
  std::string metrics_address_;
  std::map<std::string, std::uint64_t> sessions_ended_;  // by cause (NodeMetrics::sessions_ended)
  std::uint64_t reclaims_ = 0, reattachments_ = 0;
  bool stopping_ = false;
};

}  // namespace kvtier::daemon
