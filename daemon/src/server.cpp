#include "server.hpp"

#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <asio/post.hpp>

#include "kvtier/protocol/control.capnp.h"
#include "kvtier/protocol/version.hpp"
#include "kvtier/shm/control_layout.hpp"
#include "kvtier/shm/control_segment.hpp"
#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/layout.hpp"
#include "kvtier/shm/pool_segment.hpp"
#include "kvtier/shm/segment.hpp"
#include "session.hpp"
#include "tier_params.hpp"

namespace kvtier::daemon {
namespace {

wire::Handoff to_wire(HandoffState state) {
  switch (state) {
    case HandoffState::kNone: return wire::Handoff::NONE;
    case HandoffState::kExported: return wire::Handoff::EXPORTED;
    case HandoffState::kLent:
    case HandoffState::kReceiving: return wire::Handoff::ADOPTING;
    case HandoffState::kHandedOff: return wire::Handoff::HANDED_OFF;
    case HandoffState::kAdopted: return wire::Handoff::ADOPTED;
  }
  return wire::Handoff::NONE;
}

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
  // Counted before this one joins: connections still waiting for their Hello.
  const auto pending = static_cast<std::size_t>(std::count_if(clients_.begin(), clients_.end(), [](const auto& entry) {
    return entry.second.session && !entry.second.closed && entry.second.session->awaiting_hello();
  }));
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

Result<std::string> Server::check_claim(std::uint64_t previous_epoch, std::uint32_t previous_client,
                                        shm::SegmentKind kind, int fd, std::uint32_t uid) const {
  auto name = Predecessors::name_of(config_.daemon.shm_prefix, previous_epoch, previous_client, kind);
  if (!name) return tl::unexpected(name.error());
  const shm::Segment* orphan = predecessors_.find(*name);
  if (orphan == nullptr) {
    return make_error(Errc::kNotFound, "no segment " + *name +
                                           " waits for its client (never created, reattached already, or removed "
                                           "after its process exited)");
  }
  struct stat sent{}, held{};
  if (fd < 0 || ::fstat(fd, &sent) != 0 || ::fstat(orphan->fd(), &held) != 0 || sent.st_dev != held.st_dev ||
      sent.st_ino != held.st_ino) {
    return make_error(Errc::kPermissionDenied, "the fd sent for " + *name + " is not that segment");
  }
  if (orphan->owner().uid != uid) {
    return make_error(Errc::kPermissionDenied, *name + " belongs to uid " + std::to_string(orphan->owner().uid) +
                                                   ", not " + std::to_string(uid));
  }
  return name;
}

Status Server::reattach(Session& session, const PoolRequest& request, std::uint64_t previous_epoch,
                        std::uint32_t previous_client, std::span<const UniqueFd> fds,
                        std::vector<RestoredSequence> sequences, std::function<void(Status)> done) {
  if (previous_epoch == epoch_) {
    return make_error(Errc::kBadState, "epoch " + std::to_string(previous_epoch) +
                                           " is this daemon's own: a client reattaches only to a successor of "
                                           "the daemon that created its pools");
  }
  const std::size_t expected = request.int8 ? 2 : 1;
  if (fds.size() != expected) {
    return make_error(Errc::kInvalidArgument, "Reattach carries " + std::to_string(fds.size()) + " fds, needs " +
                                                  std::to_string(expected) + " (the pool's, then the int8 pool's)");
  }
  const std::uint32_t id = session.client_id();
  ClientRecord& record = clients_.at(id);
  const auto uid = static_cast<std::uint32_t>(record.peer.uid);
  auto ddr_name = check_claim(previous_epoch, previous_client, shm::SegmentKind::kPool, fds[0].get(), uid);
  if (!ddr_name) return tl::unexpected(ddr_name.error());
  std::optional<std::string> int8_name;
  if (request.int8) {
    auto claimed = check_claim(previous_epoch, previous_client, shm::SegmentKind::kInt8Pool, fds[1].get(), uid);
    if (!claimed) return tl::unexpected(claimed.error());
    int8_name = *claimed;
  }
  // The segments' own blocks must be what the client registers now.
  auto view = shm::PoolView::validate(predecessors_.find(*ddr_name)->bytes());
  if (!view) return tl::unexpected(view.error());
  if (!(view->geometry() == request.ddr)) {
    return make_error(Errc::kInvalidArgument, *ddr_name + " holds " + std::to_string(view->geometry().slots) +
                                                  " slots of another geometry than the Reattach registers");
  }
  if (int8_name) {
    auto int8_view = shm::Int8PoolView::validate(predecessors_.find(*int8_name)->bytes());
    if (!int8_view) return tl::unexpected(int8_view.error());
    if (!(int8_view->geometry() == *request.int8)) {
      return make_error(Errc::kInvalidArgument, *int8_name + " holds another int8 geometry than the Reattach "
                                                             "registers (pools.int8_group_tokens changed?)");
    }
  }
  if (auto ok = check_pool_limits(request); !ok) return ok;

  record.pool_names.push_back(*ddr_name);
  if (int8_name) record.pool_names.push_back(*int8_name);
  shm::Segment ddr = predecessors_.adopt(*ddr_name);
  std::optional<Int8Pool> int8;
  if (int8_name) int8.emplace(Int8Pool{predecessors_.adopt(*int8_name), *request.int8});
  record.pool_bytes = ddr.size() + (int8 ? int8->segment.size() : 0);
  record.int8_bytes = int8 ? int8->segment.size() : 0;
  record.weight = request.weight;
  pool_bytes_used_ += record.pool_bytes;
  int8_bytes_used_ += record.int8_bytes;
  ++reattachments_;
  std::uint64_t rows = 0;
  for (const RestoredSequence& sequence : sequences) rows += sequence.rows();
  log_.info("event=client_reattached client_id={} pid={} previous_epoch={:016x} previous_client_id={} sequences={} "
            "rows={} pool_bytes={}",
            id, record.peer.pid, previous_epoch, previous_client, sequences.size(), rows, record.pool_bytes);
  data_plane_.restore(id, PoolSetup{std::move(ddr), request.ddr, std::move(int8), request.dtype, request.weight},
                      std::move(sequences), std::move(done));
  report_status();
  return {};
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

void Server::build_status(std::function<void(capnp::MallocMessageBuilder&)> reply) {
  data_plane_.snapshot([this, reply = std::move(reply)](std::vector<ClientSnapshot> dynamic) {
    capnp::MallocMessageBuilder message;
    auto status = message.initRoot<wire::DaemonMessage>().initStatusReply();
    status.setDaemonVersion(version());
    status.setDaemonEpoch(epoch_);
    status.setProtocolMajor(protocol::kProtocolMajor);
    status.setProtocolMinor(protocol::kProtocolMinor);
    status.setLayoutVersion(shm::kLayoutVersion);
    status.setLayoutFingerprint(shm::kLayoutFingerprint);
    status.setUptimeSeconds(static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_).count()));
    status.setDdrBytesTotal(config_.pools.ddr_bytes_total);
    std::uint64_t ddr_used = 0, int8_used = 0;
    for (const auto& snapshot : dynamic) {
      ddr_used += snapshot.ddr_bytes_used;
      int8_used += snapshot.int8_bytes_used;
    }
    status.setDdrBytesUsed(ddr_used);
    status.setInt8BytesTotal(config_.pools.int8_bytes_total);
    status.setInt8BytesUsed(int8_used);
    status.setMetricsAddress(metrics_address_);
    std::vector<std::pair<const ClientRecord*, const ClientSnapshot*>> engines;
    for (const auto& snapshot : dynamic) {
      auto it = clients_.find(snapshot.client_id);
      if (it != clients_.end() && it->second.engine) engines.emplace_back(&it->second, &snapshot);
    }
    auto list = status.initClients(static_cast<unsigned>(engines.size()));
    for (unsigned i = 0; i < engines.size(); ++i) {
      const auto& [record, snap] = engines[i];
      const Session* session = record->closed ? nullptr : record->session.get();
      auto out = list[i];
      out.setClientId(snap->client_id);
      out.setPid(static_cast<std::uint32_t>(record->peer.pid));
      out.setUid(record->peer.uid);
      out.setName(session ? session->name() : record->name);
      out.setClosing(record->closed);
      if (const auto& geometry = session ? session->geometry() : record->geometry) {
        out.setNumLayers(geometry->num_layers);
        out.setNumKvHeads(geometry->num_kv_heads);
        out.setHeadDim(geometry->head_dim);
        out.setPoolSlots(geometry->slots);
      }
      out.setDtype(session ? session->dtype() : record->dtype);
      out.setModelName(session ? session->model_name() : record->model_name);
      out.setPoolSlotsUsed(snap->pool_slots_used);
      out.setScoreRecords(snap->score_records);
      out.setScoresDropped(snap->scores_dropped);
      out.setPlansSent(snap->plans_sent);
      out.setPlansAcked(snap->plans_acked);
      out.setErrors(record->errors + snap->errors);
      out.setPlansFailed(snap->plans_failed);
      out.setMovesSent(snap->moves_sent);
      out.setBackpressureTokens(snap->backpressure_tokens);
      out.setWeight(record->weight);
      out.setDdrBytesUsed(snap->ddr_bytes_used);
      out.setDdrShareBytes(snap->ddr_share_bytes);
      out.setInt8Slots(snap->int8_slots);
      out.setInt8SlotsUsed(snap->int8_slots_used);
      out.setT2Demotions(snap->t2_demotions);
      out.setPressureDemotions(snap->pressure_demotions);
      out.setPressureEvictions(snap->pressure_evictions);
      out.setInt8Trimmed(snap->int8_trimmed);
      out.setLastBackpressure(static_cast<wire::Backpressure>(snap->last_backpressure));
      auto sequences = out.initSequences(static_cast<unsigned>(snap->sequences.size()));
      for (unsigned s = 0; s < snap->sequences.size(); ++s) {
        const SequenceSnapshot& seq = snap->sequences[s];
        auto o = sequences[s];
        o.setSequenceId(seq.sequence_id);
        o.setPromptLength(seq.prompt_length);
        o.setTokens(seq.tokens);
        o.setTokensT0(seq.tokens_t0);
        o.setTokensT1(seq.tokens_t1);
        o.setTokensT2(seq.tokens_t2);
        o.setTokensT3(seq.tokens_t3);
        o.setDestroyedFraction(seq.destroyed_fraction);
        o.setHbmRatio(seq.params.hbm_ratio);
        o.setEvictRatio(seq.params.evict_ratio);
        o.setMode(to_wire(seq.params.mode));
        o.setPolicy(to_wire(seq.params.policy));
        o.setInt8Ratio(seq.params.int8_ratio);
        o.setHandoff(to_wire(seq.handoff));
      }
    }
    reply(message);
  });
}

}  // namespace kvtier::daemon
