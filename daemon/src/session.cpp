#include "session.hpp"

#include <spdlog/spdlog.h>

#include "kvtier/protocol/names.hpp"
#include "kvtier/protocol/version.hpp"
#include "kvtier/shm/layout.hpp"
#include "request_checks.hpp"
#include "server.hpp"
#include "tier_params.hpp"

namespace kvtier::daemon {
namespace {

// Errors in one request that leave the session usable; everything else (malformed frames,
// permission) ends it.
bool is_request_error(Errc code) {
  return code == Errc::kInvalidArgument || code == Errc::kNotFound || code == Errc::kLimitExceeded ||
         code == Errc::kBadState;
}

constexpr std::size_t kReadChunk = 16 * 1024;

// All of a Text field's bytes: cStr() would stop at an embedded NUL and hide what follows.
std::string_view text_of(capnp::Text::Reader text) { return {text.begin(), text.size()}; }

}  // namespace

Session::Session(Server& server, asio::local::stream_protocol::socket socket, PeerCredentials peer,
                 std::uint32_t client_id)
    : server_(server),
      socket_(std::move(socket)),
      hello_timer_(socket_.get_executor()),
      peer_(peer),
      client_id_(client_id),
      decoder_(server.config().limits.max_frame_bytes),
      read_buffer_(kReadChunk) {}

void Session::start() {
  arm_hello_timer();
  read_some();
}

void Session::arm_hello_timer() {
  const std::uint32_t timeout_ms = server_.config().limits.hello_timeout_ms;
  hello_timer_.expires_after(std::chrono::milliseconds(timeout_ms));
  hello_timer_.async_wait([self = shared_from_this(), timeout_ms](std::error_code ec) {
    // Cancelled (Hello came, or closed), or already going (a version mismatch was answered).
    if (ec || self->state_ != State::kAwaitHello || self->close_after_writes_) return;
    // Bytes the peer sent in time are read first: a busy daemon does not cut off a punctual
    // client. A peer that trickles bytes still holds one of limits.max_pending_connections.
    std::error_code ignored;
    if (self->socket_.available(ignored) > 0) return self->arm_hello_timer();
    self->fail(Error{Errc::kLimitExceeded,
                     "no Hello within limits.hello_timeout_ms=" + std::to_string(timeout_ms)});
  });
}

void Session::on_frame(protocol::FrameWords frame) {
  auto message = protocol::read_message(std::move(frame));
  if (!message) {
    fail(message.error());
    return;
  }
  auto handled = protocol::capture_protocol_errors(
      [&]() -> Status { return dispatch(message->root<wire::ClientMessage>()); });
  if (!handled) {
    if (state_ == State::kReady && is_request_error(handled.error().code)) {
      send_error(handled.error());  // the client can correct it; its session stays
    } else {
      fail(handled.error());
    }
  }
}

Status Session::dispatch(wire::ClientMessage::Reader message) {
  const auto which = message.which();
  if (state_ == State::kAwaitHello) {
    if (which != wire::ClientMessage::HELLO) return make_error(Errc::kProtocol, "first message must be Hello");
    return on_hello(message.getHello());
  }
  switch (which) {
    case wire::ClientMessage::HELLO: return make_error(Errc::kProtocol, "Hello sent twice");
    case wire::ClientMessage::REGISTER_MODEL: return on_register(message.getRegisterModel());
    case wire::ClientMessage::OPEN_SEQUENCE: return on_open(message.getOpenSequence());
    case wire::ClientMessage::CLOSE_SEQUENCE: return on_close(message.getCloseSequence());
    case wire::ClientMessage::STATUS_REQUEST: return on_status();
    case wire::ClientMessage::EXPORT_SEQUENCE: return on_export(message.getExportSequence());
    case wire::ClientMessage::ADOPT_SEQUENCE: return on_adopt(message.getAdoptSequence());
    case wire::ClientMessage::REATTACH: return on_reattach(message.getReattach());
    case wire::ClientMessage::EVENTS_REQUEST: return on_events(message.getEventsRequest());
    case wire::ClientMessage::PLACEMENT_REQUEST: return on_placement(message.getPlacementRequest());
  }
  return make_error(Errc::kInvalidArgument, "unknown request (message type " +
                                                std::to_string(static_cast<int>(which)) + ")");
}

Status Session::on_hello(wire::Hello::Reader hello) {
  const bool protocol_ok =
      protocol::is_compatible(protocol::ProtocolVersion{hello.getProtocolMajor(), hello.getProtocolMinor()});
  const bool layout_ok = hello.getLayoutVersion() == shm::kLayoutVersion &&
                         hello.getLayoutFingerprint() == shm::kLayoutFingerprint;
  role_ = hello.getRole();
  if (!protocol_ok || !layout_ok) {
    capnp::MallocMessageBuilder reply;
    auto mismatch = reply.initRoot<wire::DaemonMessage>().initVersionMismatch();
    mismatch.setDaemonProtocolMajor(protocol::kProtocolMajor);
    mismatch.setDaemonProtocolMinor(protocol::kProtocolMinor);
    mismatch.setDaemonLayoutVersion(shm::kLayoutVersion);
    mismatch.setDaemonLayoutFingerprint(shm::kLayoutFingerprint);
    mismatch.setClientProtocolMajor(hello.getProtocolMajor());
    mismatch.setClientProtocolMinor(hello.getProtocolMinor());
    mismatch.setClientLayoutVersion(hello.getLayoutVersion());
    mismatch.setClientLayoutFingerprint(hello.getLayoutFingerprint());
    const std::string text = "daemon speaks protocol " + std::to_string(protocol::kProtocolMajor) + "." +
                             std::to_string(protocol::kProtocolMinor) + " layout " +
                             std::to_string(shm::kLayoutVersion) + ", client speaks protocol " +
                             std::to_string(hello.getProtocolMajor()) + "." +
                             std::to_string(hello.getProtocolMinor()) + " layout " +
                             std::to_string(hello.getLayoutVersion());
    mismatch.setMessage(text);
    server_.log().warn("event=version_mismatch client_id={} pid={} {}", client_id_, peer_.pid, text);
    send(reply);
    shutdown_after_writes();
    return {};
  }
  // The name goes into the log and `kvtierctl status`: printable text or no session.
  const std::string_view name = text_of(hello.getClientName());
  if (auto ok = protocol::check_name("Hello.clientName", name); !ok) return ok;
  name_ = name.empty() ? "pid-" + std::to_string(peer_.pid) : std::string(name);
  std::vector<UniqueFd> fds;
  std::uint64_t control_bytes = 0;
  if (role_ == wire::SessionRole::ENGINE) {
    auto attached = server_.attach_engine(*this);
    if (!attached) return tl::unexpected(attached.error());
    control_bytes = attached->control_bytes;
    fds.push_back(std::move(attached->control_fd));
    fds.push_back(std::move(attached->doorbell_fd));
  }
  state_ = State::kReady;
  hello_timer_.cancel();
  capnp::MallocMessageBuilder reply;
  auto welcome = reply.initRoot<wire::DaemonMessage>().initWelcome();
  welcome.setProtocolMajor(protocol::kProtocolMajor);
  welcome.setProtocolMinor(protocol::kProtocolMinor);
  welcome.setLayoutVersion(shm::kLayoutVersion);
  welcome.setLayoutFingerprint(shm::kLayoutFingerprint);
  welcome.setDaemonEpoch(server_.epoch());
  welcome.setClientId(client_id_);
  welcome.setDaemonVersion(server_.version());
  welcome.setControlSegmentBytes(control_bytes);
  server_.log().info("event=hello client_id={} pid={} uid={} name={} role={}", client_id_, peer_.pid, peer_.uid, name_,
                     is_engine() ? "engine" : "admin");
  send(reply, std::move(fds));
  return {};
}

Status Session::on_register(wire::RegisterModel::Reader request) {
  if (!is_engine()) return make_error(Errc::kPermissionDenied, "RegisterModel needs the engine role");
  if (geometry_) return make_error(Errc::kBadState, "model already registered");
  const std::string_view model_name = text_of(request.getModelName());
  if (auto ok = protocol::check_name("RegisterModel.modelName", model_name); !ok) return ok;
  auto pool = pool_request_from_wire(request, server_.config().pools);
  if (!pool) return tl::unexpected(pool.error());
  auto granted = server_.register_pool(*this, *pool);
  if (!granted) return tl::unexpected(granted.error());
  geometry_ = pool->ddr;
  int8_slots_ = pool->int8 ? pool->int8->slots() : 0;
  dtype_ = request.getDtype();
  model_name_ = std::string(model_name);
  capnp::MallocMessageBuilder reply;
  auto registered = reply.initRoot<wire::DaemonMessage>().initModelRegistered();
  registered.setPoolSegmentBytes(granted->segment_bytes);
  registered.setPoolSlots(pool->ddr.slots);
  registered.setRowBytes(static_cast<std::uint32_t>(pool->ddr.row_bytes()));
  registered.setWeight(granted->weight);
  std::vector<UniqueFd> fds;
  fds.push_back(std::move(granted->pool_fd));
  if (pool->int8) {
    registered.setInt8SegmentBytes(granted->int8_segment_bytes);
    registered.setInt8Slots(pool->int8->slots());
    registered.setInt8GroupTokens(pool->int8->group_tokens);
    fds.push_back(std::move(granted->int8_fd));
  }
  send(reply, std::move(fds));
  return {};
}

Status Session::on_open(wire::OpenSequence::Reader request) {
  if (!geometry_) return make_error(Errc::kBadState, "OpenSequence before RegisterModel");
  const auto& limits = server_.config().limits;
  if (sequences_.size() >= limits.max_sequences_per_client) {
    return make_error(Errc::kLimitExceeded, "client has " + std::to_string(sequences_.size()) +
                                                " sequences open, limit limits.max_sequences_per_client=" +
                                                std::to_string(limits.max_sequences_per_client));
  }
  const std::uint32_t id = next_sequence_;
  auto open = open_request_from_wire(request, server_.config(), int8_slots_ != 0, (std::uint64_t{client_id_} << 32) | id);
  if (!open) return tl::unexpected(open.error());
  ++next_sequence_;
  sequences_.insert(id);
  server_.data_plane().open_sequence(client_id_, id, open->prompt_length, open->params, open->digest_dim,
                                     [self = shared_from_this(), id, params = open->params] {
    if (self->state_ == State::kClosed) return;
    capnp::MallocMessageBuilder reply;
    auto opened = reply.initRoot<wire::DaemonMessage>().initSequenceOpened();
    opened.setSequenceId(id);
    set_shipping(opened.initShipping(), params, 0);
    self->send(reply);
  });
  return {};
}

Status Session::on_close(wire::CloseSequence::Reader request) {
  const std::uint32_t id = request.getSequenceId();
  if (!sequences_.contains(id)) return make_error(Errc::kNotFound, "no open sequence " + std::to_string(id));
  if (close_after_handoff_settles(id)) return {};
  return close_sequence(id);
}

Status Session::close_sequence(std::uint32_t id) {
  if (!sequences_.contains(id)) return make_error(Errc::kNotFound, "no open sequence " + std::to_string(id));
  if (auto ok = cancel_export(id); !ok) return ok;
  sequences_.erase(id);
  server_.data_plane().close_sequence(client_id_, id, [self = shared_from_this(), id] {
    if (self->state_ == State::kClosed) return;
    capnp::MallocMessageBuilder reply;
    reply.initRoot<wire::DaemonMessage>().initSequenceClosed().setSequenceId(id);
    self->send(reply);
  });
  return {};
}

Status Session::require_admin(const char* request) const {
  if (role_ != wire::SessionRole::ADMIN) {
    return make_error(Errc::kPermissionDenied, std::string(request) + " needs the admin role");
  }
  // Anyone may say hello as an observer (kvtierctl version); status needs admin credentials.
  if (!peer_is_admin(peer_, server_.config().daemon.admin_group)) {
    return make_error(Errc::kPermissionDenied, "uid " + std::to_string(peer_.uid) + " is neither root nor in admin group '" +
                                                   server_.config().daemon.admin_group + "'");
  }
  return {};
}

Status Session::on_status() {
  if (auto ok = require_admin("StatusRequest"); !ok) return ok;
  server_.build_status([self = shared_from_this()](capnp::MallocMessageBuilder& reply) {
    if (self->state_ != State::kClosed) self->send(reply);
  });
  return {};
}

void Session::fail(const Error& error) {
  if (state_ == State::kClosed) return;
  server_.log().warn("event=session_error client_id={} pid={} code={} message=\"{}\"", client_id_, peer_.pid,
                     errc_name(error.code), error.message);
  server_.count_error(client_id_, error.code);
  Event event;
  event.unix_ms = unix_ms_now();
  event.kind = EventKind::kSessionError;
  event.client_id = client_id_;
  event.client_name = name_;
  event.detail = std::string(errc_name(error.code)) + ": " + error.message;
  server_.record_event(std::move(event));
  send_error(error);
  shutdown_after_writes();
}

void Session::close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  hello_timer_.cancel();
  std::error_code ignored;
  socket_.shutdown(asio::socket_base::shutdown_both, ignored);
  socket_.close(ignored);
  outgoing_.clear();
  server_.on_session_closed(client_id_);
}

}  // namespace kvtier::daemon
