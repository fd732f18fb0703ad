#include "server.hpp"

#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <asio/post.hpp>

#include "kvtier/protocol/control.capnp.h"
#include "kvtier/shm/control_layout.hpp"
#include "kvtier/shm/control_segment.hpp"
#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/layout.hpp"
#include "kvtier/shm/pool_segment.hpp"
#include "kvtier/shm/segment.hpp"
#include "session.hpp"

namespace kvtier::daemon {
namespace {

UniqueFd pidfd_open(pid_t pid) {
  return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
}

}  // namespace

Server::Server(asio::io_context& io, const config::DaemonConfig& config, DataPlane& data_plane,
               Supervisor& supervisor, spdlog::logger& log, std::uint64_t epoch)
    : io_(io),
      config_(config),
      data_plane_(data_plane),
      supervisor_(supervisor),
      log_(log),
      epoch_(epoch),
      started_(std::chrono::steady_clock::now()),
      predecessors_(config.daemon.shm_prefix, epoch, log,
                    [this](const std::string& name) { supervisor_.remove_fd(name.substr(1)); }),
      sweep_timer_(io) {
  data_plane_.on_handoff_resolved([this](const HandoffOrigin& origin, bool applied) {
    ExportRegistry::Entry* entry = exports_.find(origin.token);
    if (entry == nullptr) return;
    auto exporter = clients_.find(origin.exporter);
    if (applied || exporter == clients_.end() || exporter->second.closed) {
      exports_.erase(origin.token);  // done, or nobody left to adopt it from
      return;
    }
    entry->state = ExportRegistry::State::kWaiting;  // the token may be used again
  });
}

Server::~Server() = default;

const char* Server::version() const { return KVTIER_VERSION; }

void Server::start(asio::local::stream_protocol::acceptor acceptor,
                   std::vector<std::pair<std::string, UniqueFd>> stored) {
  acceptor_ = std::make_unique<asio::local::stream_protocol::acceptor>(std::move(acceptor));
  if (const std::size_t orphans = predecessors_.scan(std::move(stored)); orphans != 0) {
    log_.info("event=predecessor_pools orphans={} grace_ms={}", orphans, config_.limits.orphan_grace_ms);
    schedule_sweep();
  }
  accept_next();
}

void Server::schedule_sweep() {
  if (predecessors_.size() == 0 || stopping_) return;
  const std::chrono::milliseconds grace(config_.limits.orphan_grace_ms);
  sweep_timer_.expires_after(std::max<std::chrono::milliseconds>(grace, std::chrono::milliseconds(100)));
  sweep_timer_.async_wait([this, grace](std::error_code ec) {
    if (ec || stopping_) return;
    predecessors_.sweep(grace);
    schedule_sweep();
  });
}

void Server::accept_next() {
  acceptor_->async_accept([this](std::error_code ec, asio::local::stream_protocol::socket socket) {
    if (stopping_) return;
    if (!ec) {
      on_accept(std::move(socket));
    } else {
      log_.warn("event=accept_failed error=\"{}\"", ec.message());
    }
    accept_next();
  });
}

void Server::on_accept(asio::local::stream_protocol::socket socket) {
  auto peer = peer_credentials(socket.native_handle());
  if (!peer) {
    log_.warn("event=peer_credentials_failed {}", to_string(peer.error()));
    return;
  }
  const std::size_t pending = pending_count();  // counted before this one joins
  const std::uint32_t id = next_client_id_++;
  ClientRecord record;
  record.peer = *peer;
  // Taken now, before the peer can exit and its pid be reused.
  if (auto pidfd = pidfd_open(peer->pid); pidfd.get() >= 0) {
    record.pidfd = std::make_unique<asio::posix::stream_descriptor>(io_, pidfd.release());
  }
  record.session = std::make_shared<Session>(*this, std::move(socket), *peer, id);
  auto session = record.session;
  clients_.emplace(id, std::move(record));
  if (pending >= config_.limits.max_pending_connections) {
    // Told why, then closed; it held nothing, so its record goes with the session.
    session->fail(Error{Errc::kLimitExceeded, std::to_string(pending) +
                                                  " connections are waiting to send Hello, limit "
                                                  "limits.max_pending_connections=" +
                                                  std::to_string(config_.limits.max_pending_connections)});
    return;
  }
  session->start();
}

Result<EngineAttachment> Server::attach_engine(Session& session) {
  const std::size_t engines = engine_count();
  if (engines >= config_.limits.max_clients) {
    const std::size_t closing = closing_count();
    return make_error(Errc::kLimitExceeded,
                      "daemon serves " + std::to_string(engines) + " clients (" + std::to_string(closing) +
                          " of them disconnected, their pools held until their processes exit), limit "
                          "limits.max_clients=" +
                          std::to_string(config_.limits.max_clients));
  }
  auto layout = shm::ControlLayout::make(config_.limits.score_ring_records, config_.limits.plan_ring_records);
  if (!layout) return tl::unexpected(layout.error());
  auto name = segment_name(session.client_id(), shm::SegmentKind::kControl);
  if (!name) return tl::unexpected(name.error());
  auto segment = shm::create_control_segment(*name, *layout, epoch_, session.client_id());
  if (!segment) return tl::unexpected(segment.error());
  const int doorbell = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (doorbell < 0) return os_error("eventfd");
  UniqueFd daemon_doorbell(doorbell);
  auto client_control = UniqueFd::duplicate(segment->fd());
  auto client_doorbell = UniqueFd::duplicate(doorbell);
  if (!client_control) return tl::unexpected(client_control.error());
  if (!client_doorbell) return tl::unexpected(client_doorbell.error());
  EngineAttachment attachment{std::move(*client_control), std::move(*client_doorbell), segment->size()};
  clients_.at(session.client_id()).engine = true;
  data_plane_.attach(session.client_id(), std::move(*segment), *layout, std::move(daemon_doorbell));
  return attachment;
}

Status Server::check_pool_limits(const PoolRequest& request) const {
  // pools.ddr_bytes_total caps DDR rows in use (the data plane's NodeBudget), not segment sizes.
  const std::uint64_t ddr_bytes = sizeof(shm::SegmentHeader) + shm::pool_payload_bytes(request.ddr);
  const std::uint64_t int8_bytes =
      request.int8 ? sizeof(shm::SegmentHeader) + shm::int8_pool_payload_bytes(*request.int8) : 0;
  if (ddr_bytes + int8_bytes > config_.limits.max_pool_bytes_per_client) {
    return make_error(Errc::kLimitExceeded, "pools of " + std::to_string(ddr_bytes) + " (DDR) + " +
                                                std::to_string(int8_bytes) +
                                                " (int8) bytes exceed limits.max_pool_bytes_per_client=" +
                                                std::to_string(config_.limits.max_pool_bytes_per_client));
  }
  const std::uint64_t int8_total = config_.pools.int8_bytes_total;
  if (int8_total != 0 && int8_bytes_used_ + int8_bytes > int8_total) {
    return make_error(Errc::kLimitExceeded, "int8 pool of " + std::to_string(int8_bytes) + " bytes does not fit: " +
                                                std::to_string(int8_bytes_used_) + " of pools.int8_bytes_total=" +
                                                std::to_string(int8_total) + " in use");
  }
  return {};
}

Result<PoolGrant> Server::register_pool(Session& session, const PoolRequest& request) {
  if (auto ok = check_pool_limits(request); !ok) return tl::unexpected(ok.error());
  const std::uint32_t id = session.client_id();
  ClientRecord& record = clients_.at(id);
  // The header names the client's process: a successor adopts the pools only for its uid and
  // removes them once that process is gone.
  const shm::SegmentOwner owner{static_cast<std::uint32_t>(record.peer.uid), static_cast<std::uint32_t>(record.peer.pid)};
  auto name = segment_name(id, shm::SegmentKind::kPool);
  if (!name) return tl::unexpected(name.error());
  auto segment = shm::create_pool_segment(*name, request.ddr, epoch_, id, owner);
  if (!segment) return tl::unexpected(segment.error());
  auto client_fd = UniqueFd::duplicate(segment->fd());
  if (!client_fd) return tl::unexpected(client_fd.error());
  PoolGrant grant{std::move(*client_fd), segment->size(), {}, 0, request.weight};
  std::optional<shm::Segment> int8_segment;
  if (request.int8) {
    auto int8_name = segment_name(id, shm::SegmentKind::kInt8Pool);
    if (!int8_name) return tl::unexpected(int8_name.error());
    auto created = shm::create_int8_pool_segment(*int8_name, *request.int8, epoch_, id, owner);
    if (!created) return tl::unexpected(created.error());
    auto int8_fd = UniqueFd::duplicate(created->fd());
    if (!int8_fd) return tl::unexpected(int8_fd.error());
    grant.int8_fd = std::move(*int8_fd);
    grant.int8_segment_bytes = created->size();
    int8_segment.emplace(std::move(*created));
  }
  record.pool_bytes = grant.segment_bytes + grant.int8_segment_bytes;
  record.int8_bytes = grant.int8_segment_bytes;
  // Under systemd the fd store keeps the pools across a restart even if their names go.
  record.pool_names.push_back(segment->name());
  supervisor_.store_fd(segment->name().substr(1), segment->fd());
  if (int8_segment) {
    record.pool_names.push_back(int8_segment->name());
    supervisor_.store_fd(int8_segment->name().substr(1), int8_segment->fd());
  }
  record.weight = request.weight;
  pool_bytes_used_ += record.pool_bytes;
  int8_bytes_used_ += record.int8_bytes;
  std::optional<Int8Pool> int8;
  if (int8_segment) int8.emplace(Int8Pool{std::move(*int8_segment), *request.int8});
  data_plane_.set_pool(id, PoolSetup{std::move(*segment), request.ddr, std::move(int8), request.dtype, request.weight});
  report_status();
  log_.info("event=model_registered client_id={} layers={} kv_heads={} head_dim={} slots={} pool_bytes={} "
            "int8_slots={} int8_bytes={} weight={}",
            id, request.ddr.num_layers, request.ddr.num_kv_heads, request.ddr.head_dim, request.ddr.slots,
            grant.segment_bytes, request.int8 ? request.int8->slots() : 0, grant.int8_segment_bytes, request.weight);
  return grant;
}

Result<std::string> Server::segment_name(std::uint32_t client_id, shm::SegmentKind kind) const {
  // The epoch in the prefix keeps a new daemon's names clear of its predecessors'.
  return Predecessors::name_of(config_.daemon.shm_prefix, epoch_, client_id, kind);
}

void Server::count_error(std::uint32_t client_id, Errc code) {
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return;
  ++it->second.errors;
  if (it->second.end_cause.empty()) it->second.end_cause = errc_name(code);
}

void Server::fail_client(std::uint32_t client_id, const Error& error) {
  auto it = clients_.find(client_id);
  if (it != clients_.end() && it->second.session) it->second.session->fail(error);
}

void Server::on_session_closed(std::uint32_t client_id) {
  auto it = clients_.find(client_id);
  if (it == clients_.end() || it->second.closed) return;
  ClientRecord& record = it->second;
  record.closed = true;
  ++sessions_ended_[record.end_cause.empty() ? "disconnected" : record.end_cause];
  if (record.session) {
    record.name = record.session->name();
    record.model_name = record.session->model_name();
    record.geometry = record.session->geometry();
    record.dtype = record.session->dtype();
  }
  exports_.drop_waiting(client_id);
  // The Session object stays alive while its handlers run; drop our reference after them.
  asio::post(io_, [this, client_id] {
    if (auto found = clients_.find(client_id); found != clients_.end()) found->second.session.reset();
  });
  if (!record.engine || !record.pidfd) {
    reclaim(client_id);
    return;
  }
  log_.info("event=client_disconnected client_id={} pid={} waiting_for_exit=1", client_id, record.peer.pid);
  // A pidfd becomes readable when the process has exited; only then no copy can touch the pool.
  record.pidfd->async_wait(asio::posix::stream_descriptor::wait_read,
                           [this, client_id](std::error_code) { reclaim(client_id); });
}

void Server::reclaim(std::uint32_t client_id) {
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return;
  if (!it->second.engine) {
    clients_.erase(it);
    return;
  }
  data_plane_.detach(client_id, [this, client_id] {
    auto found = clients_.find(client_id);
    if (found == clients_.end()) return;
    pool_bytes_used_ -= found->second.pool_bytes;
    int8_bytes_used_ -= found->second.int8_bytes;
    ++reclaims_;
    log_.info("event=client_reclaimed client_id={} pid={} pool_bytes={}", client_id, found->second.peer.pid,
              found->second.pool_bytes);
    Event event;
    event.unix_ms = unix_ms_now();
    event.kind = EventKind::kReclaim;
    event.client_id = client_id;
    event.client_name = found->second.name;
    event.detail = "pid " + std::to_string(found->second.peer.pid) + " exited; " +
                   std::to_string(found->second.pool_bytes) + " pool bytes freed";
    record_event(std::move(event));
    for (const std::string& name : found->second.pool_names) supervisor_.remove_fd(name.substr(1));
    clients_.erase(found);
    report_status();
  });
}

std::size_t Server::engine_count() const {
  return static_cast<std::size_t>(
      std::count_if(clients_.begin(), clients_.end(), [](const auto& entry) { return entry.second.engine; }));
}

std::size_t Server::closing_count() const {
  return static_cast<std::size_t>(std::count_if(clients_.begin(), clients_.end(), [](const auto& entry) {
    return entry.second.engine && entry.second.closed;
  }));
}

std::size_t Server::pending_count() const {
  return static_cast<std::size_t>(std::count_if(clients_.begin(), clients_.end(), [](const auto& entry) {
    return entry.second.session && !entry.second.closed && entry.second.session->awaiting_hello();
  }));
}

std::uint64_t Server::uptime_seconds() const {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_).count());
}

Server::Description Server::describe(const ClientRecord& record) const {
  const Session* session = record.closed ? nullptr : record.session.get();
  if (session == nullptr) return {record.name, record.model_name, record.geometry, record.dtype};
  return {session->name(), session->model_name(), session->geometry(), session->dtype()};
}

void Server::report_status() {
  supervisor_.status("serving " + std::to_string(engine_count()) + " engine client(s), " +
                     std::to_string(pool_bytes_used_) + " pool bytes");
}

void Server::drain_and_stop(std::function<void()> done) {
  stopping_ = true;
  if (acceptor_) {
    std::error_code ignored;
    acceptor_->close(ignored);
  }
  const auto began = std::chrono::steady_clock::now();
  data_plane_.drain(std::chrono::milliseconds(config_.limits.drain_timeout_ms),
                    [this, began, done = std::move(done)](std::size_t outstanding) {
    predecessors_.keep_names();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
    log_.info("event=drained outstanding_plans={} ms={} engine_clients={} (their pools keep their names for a "
              "successor)",
              outstanding, ms.count(), engine_count());
    stop();
    done();
  });
}

void Server::stop() {
  stopping_ = true;
  sweep_timer_.cancel();
  if (acceptor_) {
    std::error_code ignored;
    acceptor_->close(ignored);
  }
  std::vector<std::shared_ptr<Session>> sessions;
  for (auto& [id, record] : clients_) {
    if (record.session) sessions.push_back(record.session);
  }
  for (auto& session : sessions) session->close();
}

}  // namespace kvtier::daemon
