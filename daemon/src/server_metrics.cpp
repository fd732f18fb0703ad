// Server::collect_metrics: the control plane's records and one DataPlane snapshot as NodeMetrics.
#include "server.hpp"

namespace kvtier::daemon {

void Server::collect_metrics(std::function<void(NodeMetrics)> done) {
  data_plane_.snapshot([this, done = std::move(done)](std::vector<ClientSnapshot> dynamic) {
    NodeMetrics m;
    m.version = version();
    m.uptime_seconds = uptime_seconds();
    m.ddr_bytes_total = config_.pools.ddr_bytes_total;
    m.int8_bytes_total = config_.pools.int8_bytes_total;
    m.segment_bytes = pool_bytes_used_;
    m.int8_segment_bytes = int8_bytes_used_;
    m.pending_connections = pending_count();
    m.sessions_ended = sessions_ended_;
    m.reclaims = reclaims_;
    m.reattachments = reattachments_;
    m.orphan_pools = predecessors_.size();
    for (ClientSnapshot& snapshot : dynamic) {
      m.ddr_bytes_used += snapshot.ddr_bytes_used;
      m.int8_bytes_used += snapshot.int8_bytes_used;
      auto it = clients_.find(snapshot.client_id);
      if (it == clients_.end() || !it->second.engine) continue;
      const ClientRecord& record = it->second;
      const Description about = describe(record);
      ClientMetrics& c = m.clients.emplace_back();
      c.client_id = snapshot.client_id;
      c.name = about.name;
      c.model = about.model_name;
      c.closing = record.closed;
      c.errors = record.errors + snapshot.errors;
      c.segment_bytes = record.pool_bytes;
      c.dynamic = std::move(snapshot);
    }
    done(std::move(m));
  });
}

}  // namespace kvtier::daemon
