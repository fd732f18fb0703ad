// Reattachment after a daemon crash or restart (PROTOCOL.md §4 "Reattachment"; DESIGN.md
// invariant 7): the client notices the daemon's end of the socket is gone, keeps every engine
// call working without plans, and reconnects with bounded backoff, presenting its pools and the
// placement its acknowledged plans left, so a successor daemon adopts them and tiering resumes.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>

#include "client.hpp"
#include "kvtier/shm/records.hpp"

namespace kvtier::client {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{20}, kMaxBackoff{1000};

// Fills positions (and slots) of every token of `record` in `tier`.
void fill(const std::vector<std::uint8_t>& tiers, const std::vector<std::uint32_t>& slots, std::uint8_t tier,
          capnp::List<std::uint32_t>::Builder (*init_positions)(wire::ReattachedSequence::Builder&, unsigned),
          capnp::List<std::uint32_t>::Builder (*init_slots)(wire::ReattachedSequence::Builder&, unsigned),
          wire::ReattachedSequence::Builder& out) {
  const auto n = static_cast<unsigned>(std::count(tiers.begin(), tiers.end(), tier));
  auto positions = init_positions(out, n);
  std::optional<capnp::List<std::uint32_t>::Builder> slot_list;
  if (init_slots != nullptr) slot_list = init_slots(out, n);
  unsigned i = 0;
  for (std::uint32_t p = 0; p < tiers.size(); ++p) {
    if (tiers[p] != tier) continue;
    positions.set(i, p);
    if (slot_list) slot_list->set(i, slots[p]);
    ++i;
  }
}

}  // namespace

void Client::SequenceRecord::grow(std::uint32_t end) {
  length = std::max(length, end);
}

void Client::SequenceRecord::apply(const kvtier_plan_move& m) {
  if (m.position >= tiers.size()) {
    tiers.resize(m.position + 1, KVTIER_T0);
    slots.resize(m.position + 1, KVTIER_NO_SLOT);
  }
  tiers[m.position] = m.to_tier;
  slots[m.position] = m.to_tier == KVTIER_T1 || m.to_tier == KVTIER_T2 ? m.dst_slot : KVTIER_NO_SLOT;
  grow(m.position + 1);
}

bool Client::attached() {
  if (!attached_ || !rings_) return attached_;
  // The daemon never speaks first on an engine connection: anything readable is its end
  // closing (EOF, or the ErrorReply of a session it ended, then EOF).
  pollfd pfd{connection_.fd(), POLLIN, 0};
  if (::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) != 0) lost();
  return attached_;
}

void Client::lost() {
  if (!attached_) return;
  attached_ = false;
  ++counters_.daemon_losses;
  backoff_ = std::chrono::milliseconds(0);
  next_attempt_ = std::chrono::steady_clock::now();
}

void Client::try_reattach(bool now) {
  if (attached_ || refused_ || !pool_ || unacknowledged()) return;
  const auto t = std::chrono::steady_clock::now();
  if (!now && t < next_attempt_) return;
  const Status done = reattach();
  if (done) {
    attached_ = true;
    ++counters_.reattachments;
    return;
  }
  // Unreachable (not started yet, died again, full): try later. Anything else is a refusal of
  // the claim that trying again would only repeat.
  if (done.error().code != Errc::kUnavailable) {
    refused_ = true;
    reattach_error_ = done.error().message;
    return;
  }
  backoff_ = std::clamp(backoff_ * 2, kFirstBackoff, kMaxBackoff);
  next_attempt_ = t + backoff_;
}

Status Client::reattach() {
  auto connection = Connection::connect(options_.socket_path);
  if (!connection) return tl::unexpected(connection.error());
  // The pools keep the names their creator gave them, through any number of restarts: the
  // claim names that daemon's epoch and client id, as the pool's header does.
  const std::uint64_t previous_epoch = pool_->header().daemon_epoch;
  const std::uint32_t previous_client = pool_->header().client_id;
  connection_ = std::move(*connection);
  if (auto ok = hello(); !ok) {
    // A daemon at limits.max_clients refuses the Hello and keeps nothing of it: try later.
    if (ok.error().code == Errc::kLimitExceeded) return make_error(Errc::kUnavailable, ok.error().message);
    return ok;
  }  // new control segment and doorbell from here on
  ++generation_;

  capnp::MallocMessageBuilder message;
  auto claim = message.initRoot<wire::ClientMessage>().initReattach();
  claim.setPreviousEpoch(previous_epoch);
  claim.setPreviousClientId(previous_client);
  auto model = claim.initModel();
  model.setNumLayers(geometry_->num_layers);
  model.setNumKvHeads(geometry_->num_kv_heads);
  model.setHeadDim(geometry_->head_dim);
  model.setDtype(static_cast<wire::KvDtype>(geometry_->dtype));
  model.setModelName(model_name_);
  model.setPoolTokens(geometry_->pool_tokens);
  model.setInt8PoolTokens(geometry_->int8_pool_tokens);
  model.setWeight(geometry_->weight);
  auto sequences = claim.initSequences(static_cast<unsigned>(records_.size()));
  unsigned i = 0;
  for (const auto& [id, record] : records_) {
    auto s = sequences[i++];
    s.setSequenceId(id);
    s.setPromptLength(record.options.prompt_length);
    s.setLength(record.length);
    set_tiering(s.initTiering(), record.options);
    using B = wire::ReattachedSequence::Builder;
    fill(record.tiers, record.slots, KVTIER_T1, [](B& b, unsigned n) { return b.initT1Positions(n); },
         [](B& b, unsigned n) { return b.initT1Slots(n); }, s);
    fill(record.tiers, record.slots, KVTIER_T2, [](B& b, unsigned n) { return b.initT2Positions(n); },
         [](B& b, unsigned n) { return b.initT2Slots(n); }, s);
    fill(record.tiers, record.slots, KVTIER_T3, [](B& b, unsigned n) { return b.initT3Positions(n); }, nullptr, s);
  }
  std::vector<int> fds{pool_fd_.get()};
  if (int8_fd_) fds.push_back(int8_fd_.get());
  auto reply = request(message, fds);
  if (!reply) return tl::unexpected(reply.error());
  auto done = protocol::capture_protocol_errors([&]() -> Status {
    if (reply->root<wire::DaemonMessage>().which() != wire::DaemonMessage::REATTACHED) {
      return make_error(Errc::kProtocol, "expected Reattached");
    }
    // Scores restart in the successor: so do the sums and step counts, with its parameters
    // (one entry per sequence sent, in the order sent; none from a daemon before 1.6).
    auto shipping = reply->root<wire::DaemonMessage>().getReattached().getShipping();
    unsigned k = 0;
    for (const auto& [id, record] : records_) {
      const ShippingParams params = k < shipping.size() ? shipping_from_wire(shipping[k]) : ShippingParams{};
      ++k;
      track_scores(id, params, record.options.score_shipping == KVTIER_SHIP_PER_STEP);
    }
    return {};
  });
  if (!done) return done;
  // Sequences left out (exported, or adopted with the hand-off plan pending) are unknown to
  // the successor: what the engine still sends for them stays here.
  for (const auto& [id, dim] : digest_dims_) {
    if (!records_.contains(id)) forgotten_.insert(id);
  }
  return {};
}

}  // namespace kvtier::client
