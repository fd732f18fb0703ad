// Client::daemon_status: the admin StatusReply copied into the C ABI's kvtier_daemon_status,
// one allocation the caller frees with kvtier_daemon_status_free.
#include <memory>
#include <vector>

#include "client.hpp"

namespace kvtier::client {
namespace {

// kvtier_daemon_status plus the storage its pointers refer to; freed as one object.
struct StatusHolder : kvtier_daemon_status {
  std::vector<kvtier_client_info> client_storage;
  std::vector<std::vector<kvtier_sequence_info>> sequence_storage;
};

}  // namespace

Result<kvtier_daemon_status*> Client::daemon_status() {
  capnp::MallocMessageBuilder message;
  message.initRoot<wire::ClientMessage>().initStatusRequest();
  auto reply = request(message);
  if (!reply) return tl::unexpected(reply.error());
  auto holder = std::make_unique<StatusHolder>();
  auto filled = protocol::capture_protocol_errors([&]() -> Status {
    auto root = reply->root<wire::DaemonMessage>();
    if (root.which() != wire::DaemonMessage::STATUS_REPLY) return make_error(Errc::kProtocol, "expected StatusReply");
    auto status = root.getStatusReply();
    copy_text(holder->daemon_version, sizeof(holder->daemon_version), status.getDaemonVersion());
    holder->daemon_epoch = status.getDaemonEpoch();
    holder->uptime_seconds = status.getUptimeSeconds();
    holder->ddr_bytes_total = status.getDdrBytesTotal();
    holder->ddr_bytes_used = status.getDdrBytesUsed();
    holder->int8_bytes_total = status.getInt8BytesTotal();
    holder->int8_bytes_used = status.getInt8BytesUsed();
    copy_text(holder->metrics_address, sizeof(holder->metrics_address), status.getMetricsAddress());
    for (auto c : status.getClients()) {
      kvtier_client_info info{};
      info.client_id = c.getClientId();
      info.pid = c.getPid();
      info.uid = c.getUid();
      copy_text(info.name, sizeof(info.name), c.getName());
      copy_text(info.model_name, sizeof(info.model_name), c.getModelName());
      info.num_layers = c.getNumLayers();
      info.num_kv_heads = c.getNumKvHeads();
      info.head_dim = c.getHeadDim();
      info.dtype = static_cast<kvtier_dtype>(c.getDtype());
      info.pool_slots = c.getPoolSlots();
      info.pool_slots_used = c.getPoolSlotsUsed();
      info.score_records = c.getScoreRecords();
      info.scores_dropped = c.getScoresDropped();
      info.plans_sent = c.getPlansSent();
      info.plans_acked = c.getPlansAcked();
      info.errors = c.getErrors();
      info.plans_failed = c.getPlansFailed();
      info.moves_sent = c.getMovesSent();
      info.backpressure_tokens = c.getBackpressureTokens();
      info.weight = c.getWeight();
      info.ddr_bytes_used = c.getDdrBytesUsed();
      info.ddr_share_bytes = c.getDdrShareBytes();
      info.int8_slots = c.getInt8Slots();
      info.int8_slots_used = c.getInt8SlotsUsed();
      info.t2_demotions = c.getT2Demotions();
      info.pressure_demotions = c.getPressureDemotions();
      info.pressure_evictions = c.getPressureEvictions();
      info.int8_trimmed = c.getInt8Trimmed();
      info.last_backpressure = static_cast<kvtier_backpressure>(c.getLastBackpressure());
      info.closing = c.getClosing() ? 1 : 0;
      auto& seqs = holder->sequence_storage.emplace_back();
      for (auto s : c.getSequences()) {
        seqs.push_back(kvtier_sequence_info{s.getSequenceId(), s.getPromptLength(), s.getTokens(), s.getTokensT0(),
                                            s.getTokensT1(), s.getTokensT2(), s.getTokensT3(),
                                            s.getDestroyedFraction(), s.getHbmRatio(), s.getEvictRatio(),
                                            static_cast<kvtier_eviction_mode>(s.getMode()),
                                            static_cast<kvtier_policy>(s.getPolicy()), s.getInt8Ratio(),
                                            static_cast<kvtier_handoff>(s.getHandoff())});
      }
      holder->client_storage.push_back(info);
    }
    return {};
  });
  if (!filled) return tl::unexpected(filled.error());
  for (std::size_t i = 0; i < holder->client_storage.size(); ++i) {
    holder->client_storage[i].sequence_count = holder->sequence_storage[i].size();
    holder->client_storage[i].sequences = holder->sequence_storage[i].data();
  }
  holder->client_count = holder->client_storage.size();
  holder->clients = holder->client_storage.data();
  return holder.release();
}

void free_daemon_status(kvtier_daemon_status* status) { delete static_cast<StatusHolder*>(status); }

}  // namespace kvtier::client
