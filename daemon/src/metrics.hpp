// Metrics: what kvtierd exposes to Prometheus (docs/metrics.md lists every metric). The control
// thread collects a NodeMetrics value (Server::collect_metrics: its own records plus one
// DataPlane snapshot); render_metrics turns it into the text exposition format, on whatever
// thread serves the scrape (metrics_server.hpp).
//
// Label cardinality is bounded by the clients alive at once: labels are client (its name),
// client_id, model, and fixed sets (tier, from/to, reason, cause); never a sequence.
//
// Thread-safety: plain values and a pure function.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "channel_types.hpp"

namespace kvtier::daemon {

struct ClientMetrics {
  std::uint32_t client_id = 0;
  std::string name, model;
  bool closing = false;
  std::uint64_t errors = 0;            // session and data-plane errors
  std::uint64_t segment_bytes = 0;     // its pool segments (DDR and int8), reserved whole
  ClientSnapshot dynamic;
};

struct NodeMetrics {
  std::string version;
  std::uint64_t uptime_seconds = 0;
  std::uint64_t ddr_bytes_total = 0, ddr_bytes_used = 0;    // node budget (pools.ddr_bytes_total), rows held
  std::uint64_t int8_bytes_total = 0, int8_bytes_used = 0;  // pools.int8_bytes_total (0 = none), blocks held
  std::uint64_t segment_bytes = 0, int8_segment_bytes = 0;  // all pool segments; of them, int8
  std::uint64_t pending_connections = 0;                    // not past Hello
  std::map<std::string, std::uint64_t> sessions_ended;      // by cause: "disconnected" or an error code name
  std::uint64_t reclaims = 0;       // engine clients whose pools were freed after their process exited
  std::uint64_t reattachments = 0;  // clients that reattached their pools after a daemon restart
  std::uint64_t orphan_pools = 0;   // a predecessor's pool segments waiting for their client
  std::vector<ClientMetrics> clients;
};

// The Prometheus text exposition format (version 0.0.4): HELP and TYPE for every family,
// label values escaped.
std::string render_metrics(const NodeMetrics& metrics);

}  // namespace kvtier::daemon
