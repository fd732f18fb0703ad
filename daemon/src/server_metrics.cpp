// Server::collect_metrics: the control plane's records and one DataPlane snapshot as NodeMetrics.
#include <algorithm>

#include "server.hpp"
#include "session.hpp"

namespace kvtier::daemon {

void Server::collect_metrics(std::function<void(NodeMetrics)> done) {
  data_plane_.snapshot([this, done = std::move(done)](std::vector<ClientSnapshot> dynamic) {
    NodeMetrics m;
    m.version = version();
    m.uptime_seconds = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_).count());
    m.ddr_bytes_total = config_.pools.ddr_bytes_total;
    m.int8_bytes_total = config_.pools.int8_bytes_total;
    m.segment_bytes = pool_bytes_used_;
    m.int8_segment_bytes = int8_bytes_used_;
    m.pending_connections = static_cast<std::uint64_t>(std::count_if(clients_.begin(), clients_.end(), [](const auto& e) {
      return e.second.session && !e.second.closed && e.second.session->awaiting_hello();
    }));
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
      const Session* session = record.closed ? nullptr : record.session.get();
      ClientMetrics& c = m.clients.emplace_back();
      c.client_id = snapshot.client_id;
      c.name = session ? session->name() : record.name;
      c.model = session ? session->model_name() : record.model_name;
      c.closing = record.closed;
      c.errors = record.errors + snapshot.errors;
      if (const auto& geometry = session ? session->geometry() : record.geometry) {
        c.token_bytes = geometry->row_bytes() * geometry->num_layers;
      }
      c.segment_bytes = record.pool_bytes;
      c.dynamic = std::move(snapshot);
    }
    done(std::move(m));
  });
}

}  // namespace kvtier::daemon
