// Session: one client connection on the control plane. Reads frames, runs the handshake and
// the control requests (register, open/close sequence, status), and sends replies, passing
// segment fds with SCM_RIGHTS. Bulk per-step data never passes here (see data_plane.hpp).
//
// Every byte the peer sends is untrusted: a malformed frame or a request out of order ends this
// session with an ErrorReply; nothing else is affected. Thread-safety: lives on the control
// io_context thread; owned by the Server through a shared_ptr kept alive by pending handlers.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <asio/local/stream_protocol.hpp>
#include <asio/steady_timer.hpp>
#include <capnp/message.h>

#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/protocol/framing.hpp"
#include "kvtier/base/unique_fd.hpp"
#include "kvtier/shm/pool_geometry.hpp"
#include "peer.hpp"

namespace kvtier::daemon {

class Server;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Server& server, asio::local::stream_protocol::socket socket, PeerCredentials peer, std::uint32_t client_id);

  // Starts reading; a peer that has not sent Hello within limits.hello_timeout_ms gets an
  // error and is closed.
  void start();
  // Sends an ErrorReply (when the socket still works) and closes; the Server reclaims the
  // client's resources once its process is gone.
  void fail(const Error& error);
  // Closes without a reply (daemon shutdown).
  void close();

  std::uint32_t client_id() const { return client_id_; }
  const PeerCredentials& peer() const { return peer_; }
  const std::string& name() const { return name_; }
  bool is_engine() const { return role_ == wire::SessionRole::ENGINE; }
  // Connected, no Hello yet (counts against limits.max_pending_connections).
  bool awaiting_hello() const { return state_ == State::kAwaitHello; }
  const std::optional<shm::PoolGeometry>& geometry() const { return geometry_; }
  const std::string& model_name() const { return model_name_; }
  wire::KvDtype dtype() const { return dtype_; }

 private:
  enum class State { kAwaitHello, kReady, kClosed };

  void read_some();
  // Fails the session when its Hello has not arrived within limits.hello_timeout_ms.
  void arm_hello_timer();
  void on_frame(protocol::FrameWords frame);
  Status dispatch(wire::ClientMessage::Reader message);
  Status on_hello(wire::Hello::Reader hello);
  Status on_register(wire::RegisterModel::Reader request);
  Status on_open(wire::OpenSequence::Reader request);
  Status on_close(wire::CloseSequence::Reader request);
  // Cancels an export nobody adopts, then closes (CloseSequence's reply when it succeeds).
  Status close_sequence(std::uint32_t id);
  Status on_status();
  // kPermissionDenied unless the session is an admin one from an admin peer (root, the daemon's
  // uid or the admin group); `request` names what was refused.
  Status require_admin(const char* request) const;
  // Events and placement (session_admin.cpp; PROTOCOL.md §4 "Events and placement").
  Status on_events(wire::EventsRequest::Reader request);
  Status on_placement(wire::PlacementRequest::Reader request);
  // Reattach after a daemon restart (session_reattach.cpp; PROTOCOL.md §4 "Reattachment").
  Status on_reattach(wire::Reattach::Reader request);
  // Sequence hand-off (session_handoff.cpp).
  Status on_export(wire::ExportSequence::Reader request);
  Status on_adopt(wire::AdoptSequence::Reader request);
  // An export of `id` nobody is adopting is cancelled; kBadState while an adoption is in flight.
  Status cancel_export(std::uint32_t id);
  // When `id` is being adopted: the adopter may have acknowledged the hand-off plan without
  // kvtierd having read the ack yet (and told this client so out of band), so the adopter's
  // channel catches up first and close_sequence runs after. False when there is nothing to wait for.
  bool close_after_handoff_settles(std::uint32_t id);
  // recvmsg into read_buffer_, keeping the fds that came along; 0 bytes: peer gone;
  // kNothingYet (session_io.cpp): no data after all.
  Result<std::size_t> receive();

  // Queues a frame; `fds` travel with its first byte (SCM_RIGHTS) and are closed once sent.
  void send(capnp::MessageBuilder& message, std::vector<UniqueFd> fds = {});
  void send_error(const Error& error);
  void write_next();
  void shutdown_after_writes();

  struct Outgoing {
    std::vector<std::byte> bytes;
    std::vector<UniqueFd> fds;
  };

  Server& server_;
  asio::local::stream_protocol::socket socket_;
  asio::steady_timer hello_timer_;
  PeerCredentials peer_;
  std::uint32_t client_id_;
  State state_ = State::kAwaitHello;
  wire::SessionRole role_ = wire::SessionRole::ENGINE;
  std::string name_;
  std::optional<shm::PoolGeometry> geometry_;
  std::uint32_t int8_slots_ = 0;  // 0: the client has no int8 pool
  std::string model_name_;
  wire::KvDtype dtype_ = wire::KvDtype::F16;
  std::set<std::uint32_t> sequences_;
  std::uint32_t next_sequence_ = 1;
  protocol::FrameDecoder decoder_;
  std::vector<std::byte> read_buffer_;
  std::deque<UniqueFd> received_fds_;  // sent with ExportSequence frames, taken in order
  std::deque<Outgoing> outgoing_;
  bool writing_ = false;
  bool close_after_writes_ = false;
};

}  // namespace kvtier::daemon
