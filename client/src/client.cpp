#include "client.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "kvtier/protocol/defaults.hpp"
#include "kvtier/protocol/version.hpp"
#include "kvtier/shm/layout.hpp"

namespace kvtier::client {
namespace {

Error error_from_reply(wire::ErrorReply::Reader reply) {
  const std::uint32_t code = reply.getCode();
  const Errc errc = code <= static_cast<std::uint32_t>(Errc::kInternal) ? static_cast<Errc>(code) : Errc::kInternal;
  return Error{errc, std::string("kvtierd: ") + reply.getMessage().cStr()};
}

}  // namespace

void copy_text(char* dst, std::size_t size, capnp::Text::Reader text) {
  const std::size_t n = std::min(size - 1, static_cast<std::size_t>(text.size()));
  std::memcpy(dst, text.cStr(), n);
  dst[n] = '\0';
}

Status Client::connect(const ClientOptions& options, std::unique_ptr<Client>& out) {
  auto connection = Connection::connect(options.socket_path);
  if (!connection) return tl::unexpected(connection.error());
  out.reset(new Client(std::move(*connection), options));
  return out->hello();
}

Status Client::hello() {
  versions_.struct_size = sizeof(versions_);
  versions_.client_protocol_major = protocol::kProtocolMajor;
  versions_.client_protocol_minor = protocol::kProtocolMinor;
  versions_.client_layout_version = shm::kLayoutVersion;
  versions_.client_layout_fingerprint = shm::kLayoutFingerprint;
  capnp::MallocMessageBuilder message;
  auto hello = message.initRoot<wire::ClientMessage>().initHello();
  hello.setProtocolMajor(protocol::kProtocolMajor);
  hello.setProtocolMinor(protocol::kProtocolMinor);
  hello.setLayoutVersion(shm::kLayoutVersion);
  hello.setLayoutFingerprint(shm::kLayoutFingerprint);
  hello.setClientName(options_.name);
  hello.setRole(options_.role == KVTIER_ROLE_ADMIN ? wire::SessionRole::ADMIN : wire::SessionRole::ENGINE);
  if (auto sent = connection_.send(message); !sent) return sent;
  auto reply = connection_.receive(options_.reply_timeout);
  if (!reply) return tl::unexpected(reply.error());
  return protocol::capture_protocol_errors([&]() -> Status {
    auto root = reply->root<wire::DaemonMessage>();
    switch (root.which()) {
      case wire::DaemonMessage::VERSION_MISMATCH: {
        auto m = root.getVersionMismatch();
        versions_.daemon_protocol_major = m.getDaemonProtocolMajor();
        versions_.daemon_protocol_minor = m.getDaemonProtocolMinor();
        versions_.daemon_layout_version = m.getDaemonLayoutVersion();
        versions_.daemon_layout_fingerprint = m.getDaemonLayoutFingerprint();
        return make_error(Errc::kVersionMismatch, std::string("kvtierd refused the client: ") + m.getMessage().cStr());
      }
      case wire::DaemonMessage::ERROR: return tl::unexpected(error_from_reply(root.getError()));
      case wire::DaemonMessage::WELCOME: break;
      default: return make_error(Errc::kProtocol, "expected Welcome from kvtierd");
    }
    auto welcome = root.getWelcome();
    versions_.daemon_protocol_major = welcome.getProtocolMajor();
    versions_.daemon_protocol_minor = welcome.getProtocolMinor();
    versions_.daemon_layout_version = welcome.getLayoutVersion();
    versions_.daemon_layout_fingerprint = welcome.getLayoutFingerprint();
    versions_.daemon_epoch = welcome.getDaemonEpoch();
    versions_.client_id = welcome.getClientId();
    copy_text(versions_.daemon_version, sizeof(versions_.daemon_version), welcome.getDaemonVersion());
    if (options_.role != KVTIER_ROLE_ENGINE) return {};
    auto control_fd = connection_.take_fd();
    auto doorbell_fd = connection_.take_fd();
    if (!control_fd) return tl::unexpected(control_fd.error());
    if (!doorbell_fd) return tl::unexpected(doorbell_fd.error());
    auto mapping = shm::Mapping::map_segment(control_fd->get(), shm::SegmentKind::kControl, versions_.daemon_epoch);
    if (!mapping) return tl::unexpected(mapping.error());
    control_.emplace(std::move(*mapping));
    auto rings = shm::client_rings(*control_);
    if (!rings) return tl::unexpected(rings.error());
    rings_.emplace(std::move(*rings));
    doorbell_ = std::move(*doorbell_fd);
    return {};
  });
}

Result<protocol::MessageIn> Client::request(capnp::MessageBuilder& message, std::span<const int> fds) {
  if (auto sent = connection_.send(message, fds); !sent) {
    if (sent.error().code == Errc::kUnavailable) lost();
    return tl::unexpected(sent.error());
  }
  auto reply = connection_.receive(options_.reply_timeout);
  if (!reply) {
    if (reply.error().code == Errc::kUnavailable) lost();
    return reply;
  }
  auto error = protocol::capture_protocol_errors([&]() -> Status {
    auto root = reply->root<wire::DaemonMessage>();
    if (root.which() == wire::DaemonMessage::ERROR) return tl::unexpected(error_from_reply(root.getError()));
    return {};
  });
  if (!error) return tl::unexpected(error.error());
  return reply;
}

Status Client::require_engine(const char* what) const {
  if (!rings_) return make_error(Errc::kBadState, std::string(what) + " needs a client connected with the engine role");
  return {};
}

Status Client::register_model(const kvtier_model_geometry& geometry) {
  if (auto ok = require_engine("register_model"); !ok) return ok;
  if (geometry.dtype > KVTIER_DTYPE_F32) return make_error(Errc::kInvalidArgument, "unknown dtype");
  capnp::MallocMessageBuilder message;
  auto reg = message.initRoot<wire::ClientMessage>().initRegisterModel();
  reg.setNumLayers(geometry.num_layers);
  reg.setNumKvHeads(geometry.num_kv_heads);
  reg.setHeadDim(geometry.head_dim);
  reg.setDtype(static_cast<wire::KvDtype>(geometry.dtype));
  reg.setModelName(geometry.model_name != nullptr ? geometry.model_name : "");
  reg.setPoolTokens(geometry.pool_tokens);
  reg.setInt8PoolTokens(geometry.int8_pool_tokens);
  reg.setWeight(geometry.weight);
  auto reply = request(message);
  if (!reply) return tl::unexpected(reply.error());
  return protocol::capture_protocol_errors([&]() -> Status {
    auto root = reply->root<wire::DaemonMessage>();
    if (root.which() != wire::DaemonMessage::MODEL_REGISTERED) return make_error(Errc::kProtocol, "expected ModelRegistered");
    auto registered = root.getModelRegistered();
    auto fd = connection_.take_fd();
    if (!fd) return tl::unexpected(fd.error());
    auto mapping = shm::Mapping::map_segment(fd->get(), shm::SegmentKind::kPool, versions_.daemon_epoch);
    if (!mapping) return tl::unexpected(mapping.error());
    auto view = shm::PoolView::validate(mapping->bytes());
    if (!view) return tl::unexpected(view.error());
    // With T2 the int8 pool's fd follows the pool's.
    std::optional<shm::Mapping> int8_mapping;
    std::optional<shm::Int8PoolView> int8_view;
    UniqueFd int8_fd;
    if (registered.getInt8Slots() > 0) {
      auto taken = connection_.take_fd();
      if (!taken) return tl::unexpected(taken.error());
      int8_fd = std::move(*taken);
      auto mapped = shm::Mapping::map_segment(int8_fd.get(), shm::SegmentKind::kInt8Pool, versions_.daemon_epoch);
      if (!mapped) return tl::unexpected(mapped.error());
      auto validated = shm::Int8PoolView::validate(mapped->bytes());
      if (!validated) return tl::unexpected(validated.error());
      if (validated->geometry().slots() < registered.getInt8Slots()) {
        return make_error(Errc::kProtocol, "int8 pool segment holds fewer slots than ModelRegistered grants");
      }
      int8_mapping.emplace(std::move(*mapped));
      int8_view.emplace(*validated);
    }
    pool_.emplace(std::move(*mapping));
    pool_view_.emplace(*view);
    int8_pool_ = std::move(int8_mapping);
    int8_view_ = int8_view;
    geometry_ = geometry;
    geometry_->model_name = nullptr;
    model_name_ = geometry.model_name != nullptr ? geometry.model_name : "";
    pool_fd_ = std::move(*fd);  // kept: a successor daemon is shown them (reattach.cpp)
    int8_fd_ = std::move(int8_fd);
    return {};
  });
}

Result<std::uint32_t> Client::open_sequence(const kvtier_sequence_options& o) {
  if (auto ok = require_engine("open_sequence"); !ok) return tl::unexpected(ok.error());
  if (!attached()) try_reattach(true);
  if (!attached_) {
    return make_error(Errc::kUnavailable, refused_ ? "kvtierd refused the reattachment: " + reattach_error_
                                                   : std::string("kvtierd is gone and no successor answers yet"));
  }
  capnp::MallocMessageBuilder message;
  auto open = message.initRoot<wire::ClientMessage>().initOpenSequence();
  open.setPromptLength(o.prompt_length);
  if (o.use_defaults == 0 && o.mode > KVTIER_EVICT_PAPER_PROTOTYPE) {
    return make_error(Errc::kInvalidArgument, "unknown eviction mode");
  }
  if (o.use_defaults == 0 && o.policy > KVTIER_POLICY_R_KV) return make_error(Errc::kInvalidArgument, "unknown policy");
  set_tiering(open.initTiering(), o);
  auto reply = request(message);
  if (!reply) return tl::unexpected(reply.error());
  return protocol::capture_protocol_errors([&]() -> Result<std::uint32_t> {
    auto root = reply->root<wire::DaemonMessage>();
    if (root.which() != wire::DaemonMessage::SEQUENCE_OPENED) return make_error(Errc::kProtocol, "expected SequenceOpened");
    const std::uint32_t id = root.getSequenceOpened().getSequenceId();
    track_scores(id, shipping_from_wire(root.getSequenceOpened().getShipping()),
                 o.score_shipping == KVTIER_SHIP_PER_STEP);
    digest_dims_[id] = o.key_digest_dim == 0 ? protocol::kDefaultKeyDigestDim : o.key_digest_dim;
    SequenceRecord& record = records_[id];
    record.options = o;
    record.length = o.prompt_length;
    return id;
  });
}

Status Client::close_sequence(std::uint32_t sequence) {
  caches_.erase(sequence);
  peers_.erase(sequence);  // an adopted sequence closed before its hand-off plan ran
  digest_dims_.erase(sequence);
  scores_.erase(sequence);
  records_.erase(sequence);
  for (auto& [epoch, polled] : polled_) {
    if (polled.sequence == sequence) {  // kvtierd rolls it back at the close
      polled.closed = true;
      polled.moves = {};
    }
  }
  // The daemon is gone (it reattaches without it), or its successor never knew it.
  if (forgotten_.erase(sequence) != 0 || (rings_ && !attached())) return {};
  capnp::MallocMessageBuilder message;
  message.initRoot<wire::ClientMessage>().initCloseSequence().setSequenceId(sequence);
  auto reply = request(message);
  if (!reply) return tl::unexpected(reply.error());
  return {};
}

void Client::ring_doorbell() const {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(doorbell_.get(), &one, sizeof(one));
}

Result<std::optional<kvtier_plan>> Client::poll_plan(std::chrono::milliseconds timeout) {
  if (auto ok = require_engine("poll_plan"); !ok) return tl::unexpected(ok.error());
  std::erase_if(polled_, [](const auto& entry) { return entry.second.acked; });
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Without a daemon there is no plan: wait out the timeout, reattaching when the backoff says.
  while (!attached()) {
    try_reattach();
    if (attached_) break;
    if (std::chrono::steady_clock::now() >= deadline) return std::optional<kvtier_plan>{};
    // No attempt is due before next_attempt_; none at all after a refusal or while a polled plan
    // waits for its acknowledgement.
    std::this_thread::sleep_until(refused_ || unacknowledged() ? deadline : std::min(deadline, next_attempt_));
  }
  std::uint64_t epoch = 0;
  std::uint32_t sequence = 0;
  std::vector<kvtier_plan_move> moves;
  for (;;) {
    auto popped = rings_->plans.pop(std::span(&plan_record_, 1));
    if (!popped) return tl::unexpected(popped.error());
    if (*popped == 0) {
      const auto left = deadline - std::chrono::steady_clock::now();
      // Once a plan has begun its remaining records are already on their way: wait for them.
      if (left <= std::chrono::nanoseconds::zero() && epoch == 0) return std::optional<kvtier_plan>{};
      rings_->plans.wait(std::max<std::chrono::nanoseconds>(left, std::chrono::milliseconds(epoch ? 100 : 0)));
      continue;
    }
    const shm::PlanRecord& record = plan_record_;
    if (epoch != 0 && (record.epoch != epoch || record.sequence != sequence)) {
      return make_error(Errc::kProtocol, "plan record of epoch " + std::to_string(record.epoch) +
                                             " interleaved with epoch " + std::to_string(epoch));
    }
    epoch = record.epoch;
    sequence = record.sequence;
    ++counters_.plan_records_received;
    for (std::uint16_t i = 0; i < record.move_count; ++i) {
      const shm::PlanMove& m = record.moves[i];
      moves.push_back(kvtier_plan_move{m.position, m.from_tier, m.to_tier, 0, m.src_slot, m.dst_slot});
    }
    if ((record.flags & shm::kPlanLast) != 0) break;
  }
  // kvtierd keeps at most one plan per sequence in flight and numbers plans upwards.
  for (const auto& [earlier, p] : polled_) {
    if (earlier >= epoch && p.generation == generation_) {
      return make_error(Errc::kProtocol, "plan epoch " + std::to_string(epoch) + " after epoch " +
                                             std::to_string(earlier));
    }
    if (p.sequence == sequence && p.generation == generation_ && !p.acked && !p.closed) {
      return make_error(Errc::kProtocol, "plan epoch " + std::to_string(epoch) + " for sequence " +
                                             std::to_string(sequence) + " while its epoch " + std::to_string(earlier) +
                                             " is unacknowledged");
    }
  }
  Polled& polled = polled_[epoch] = Polled{sequence, generation_, std::move(moves), false, false};
  return kvtier_plan{epoch, sequence, polled.moves.size(), polled.moves.data()};
}

bool Client::unacknowledged() const {
  return std::any_of(polled_.begin(), polled_.end(), [this](const auto& entry) {
    return !entry.second.acked && !entry.second.closed && entry.second.generation == generation_;
  });
}

Status Client::ack_plan(std::uint64_t epoch, bool applied) {
  if (auto ok = require_engine("ack_plan"); !ok) return ok;
  auto found = polled_.find(epoch);
  if (found == polled_.end() || found->second.acked) {
    return make_error(Errc::kInvalidArgument, "epoch " + std::to_string(epoch) +
                                                  (found == polled_.end() ? " was not polled (or is acknowledged and gone)"
                                                                          : " already acknowledged"));
  }
  Polled& polled = found->second;
  polled.acked = true;
  ++counters_.plans_acked;
  // Its sequence was closed (kvtierd rolled the plan back), or it came from a daemon since lost
  // and replaced: nobody reads an ack of it.
  if (polled.closed || polled.generation != generation_) return {};
  const shm::AckResult pushed = applied ? rings_->plans.ack(epoch) : rings_->plans.fail(epoch);
  if (pushed == shm::AckResult::kFull) {
    polled.acked = false;
    --counters_.plans_acked;
    return make_error(Errc::kProtocol, "plan acknowledgement slots full: kvtierd has more than " +
                                           std::to_string(shm::kPlanAckSlots) + " plans unacknowledged");
  }
  // The record a successor daemon rebuilds the sequence from (reattach.cpp).
  auto it = records_.find(polled.sequence);
  if (applied && it != records_.end()) {
    for (const kvtier_plan_move& m : polled.moves) it->second.apply(m);
  }
  if (pushed == shm::AckResult::kPushedWake) ring_doorbell();
  return {};
}

Result<bool> Client::sync(std::chrono::milliseconds timeout) {
  if (auto ok = require_engine("sync"); !ok) return tl::unexpected(ok.error());
  if (!attached()) try_reattach();
  // The daemon raises no futex for this: poll both flags, backing off from 20 us to 1 ms.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(20);
  while (!(rings_->scores.consumer_idle() && rings_->plans.producer_idle())) {
    if (!attached()) return true;  // nobody left to wait for: what was published is dropped
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  return true;
}

Status Client::attach_cache(std::uint32_t sequence, const kvtier_kv_layout& layout) {
  if (!pool_view_) return make_error(Errc::kBadState, "attach_cache before register_model");
  if (auto it = caches_.find(sequence); it != caches_.end()) return it->second->relocate(layout);
  const shm::PoolView& pool = *pool_view_;
  const shm::PoolGeometry& g = pool.geometry();
  const kernels::PoolView view{pool.rows().data(), g.row_bytes(), g.layer_stride(), g.slots, g.num_layers};
  auto cache = SequenceCache::create(layout, view, int8_view_);
  if (!cache) return tl::unexpected(cache.error());
  caches_[sequence] = std::move(*cache);
  return {};
}

Result<SequenceCache*> Client::cache(std::uint32_t sequence) const {
  auto it = caches_.find(sequence);
  if (it == caches_.end()) {
    return make_error(Errc::kBadState, "sequence " + std::to_string(sequence) + " has no attached cache");
  }
  return it->second.get();
}

kvtier_client_counters Client::counters() const {
  kvtier_client_counters out = counters_;
  out.struct_size = sizeof(out);
  if (rings_) {
    const shm::PlanConsumer::Backpressure notice = rings_->plans.backpressure();
    out.backpressure_tokens = notice.tokens;
    out.backpressure_reason = notice.reason;
  }
  out.detached = attached_ ? 0 : 1;
  out.reattach_refused = refused_ ? 1 : 0;
  return out;
}

}  // namespace kvtier::client
