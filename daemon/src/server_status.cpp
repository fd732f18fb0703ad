// Server::build_status: the admin StatusReply from the control plane's records and one
// DataPlane snapshot.
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/protocol/version.hpp"
#include "kvtier/shm/layout.hpp"
#include "server.hpp"
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

}  // namespace

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
    status.setUptimeSeconds(uptime_seconds());
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
      const Description about = describe(*record);
      auto out = list[i];
      out.setClientId(snap->client_id);
      out.setPid(static_cast<std::uint32_t>(record->peer.pid));
      out.setUid(record->peer.uid);
      out.setName(about.name);
      out.setClosing(record->closed);
      if (const auto& geometry = about.geometry) {
        out.setNumLayers(geometry->num_layers);
        out.setNumKvHeads(geometry->num_kv_heads);
        out.setHeadDim(geometry->head_dim);
        out.setPoolSlots(geometry->slots);
      }
      out.setDtype(about.dtype);
      out.setModelName(about.model_name);
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
