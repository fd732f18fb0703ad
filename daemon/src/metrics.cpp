#include "metrics.hpp"

#include <array>
#include <charconv>
#include <string_view>
#include <utility>

namespace kvtier::daemon {
namespace {

using Label = std::pair<std::string_view, std::string>;

constexpr std::array<std::string_view, 4> kTierNames = {"t0", "t1", "t2", "t3"};

// Label values escape backslash, double quote and newline (the exposition format's rule).
void append_escaped(std::string& out, std::string_view value) {
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }

  template <class Number>
  void sample(std::string_view name, const std::vector<Label>& labels, Number value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      for (std::size_t i = 0; i < labels.size(); ++i) {
        if (i != 0) out_ += ',';
        out_ += labels[i].first;
        out_ += "=\"";
        append_escaped(out_, labels[i].second);
        out_ += '"';
      }
      out_ += '}';
    }
    out_ += ' ';
    char buffer[32];
    const auto end = std::to_chars(buffer, buffer + sizeof buffer, value).ptr;
    out_.append(buffer, end);
    out_ += '\n';
  }

  void histogram(std::string_view name, std::vector<Label> labels, const LatencyHistogram& h) {
    const std::string bucket = std::string(name) + "_bucket";
    std::uint64_t cumulative = 0;
    labels.emplace_back("le", "");
    for (std::size_t i = 0; i < h.buckets().size(); ++i) {
      cumulative += h.buckets()[i];
      if (i < LatencyHistogram::kBounds.size()) {
        char buffer[32];
        const auto end = std::to_chars(buffer, buffer + sizeof buffer, LatencyHistogram::kBounds[i]).ptr;
        labels.back().second.assign(buffer, end);
      } else {
        labels.back().second = "+Inf";
      }
      sample(bucket, labels, cumulative);
    }
    labels.pop_back();
    sample(std::string(name) + "_sum", labels, h.sum_seconds());
    sample(std::string(name) + "_count", labels, h.count());
  }

  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::vector<Label> client_labels(const ClientMetrics& c) {
  return {{"client", c.name}, {"client_id", std::to_string(c.client_id)}, {"model", c.model}};
}

std::vector<Label> with(std::vector<Label> labels, std::string_view key, std::string value) {
  labels.emplace_back(key, std::move(value));
  return labels;
}

// Tokens per tier (t0..t3) over the client's sequences.
std::array<std::uint64_t, 4> tier_tokens(const ClientMetrics& c) {
  std::array<std::uint64_t, 4> tokens{};
  for (const SequenceSnapshot& s : c.dynamic.sequences) {
    tokens[0] += s.tokens_t0;
    tokens[1] += s.tokens_t1;
    tokens[2] += s.tokens_t2;
    tokens[3] += s.tokens_t3;
  }
  return tokens;
}

// One family with one sample per client.
template <class Value>
void per_client(Exposition& e, const NodeMetrics& m, std::string_view name, std::string_view type,
                std::string_view help, Value value) {
  e.family(name, type, help);
  for (const ClientMetrics& c : m.clients) e.sample(name, client_labels(c), value(c));
}

void node_families(Exposition& e, const NodeMetrics& m) {
  e.family("kvtier_build_info", "gauge", "kvtierd's version (value 1).");
  e.sample("kvtier_build_info", {{"version", m.version}}, 1);
  e.family("kvtier_uptime_seconds", "gauge", "Seconds since this kvtierd started.");
  e.sample("kvtier_uptime_seconds", {}, m.uptime_seconds);
  e.family("kvtier_pool_capacity_bytes", "gauge",
           "Node-wide budget of host rows: pools.ddr_bytes_total (DDR rows) and pools.int8_bytes_total "
           "(int8 segments; absent when unlimited).");
  e.sample("kvtier_pool_capacity_bytes", {{"pool", "ddr"}}, m.ddr_bytes_total);
  if (m.int8_bytes_total != 0) e.sample("kvtier_pool_capacity_bytes", {{"pool", "int8"}}, m.int8_bytes_total);
  e.family("kvtier_pool_used_bytes", "gauge", "Bytes of host rows holding tokens (T1 rows; T2 int8 blocks).");
  e.sample("kvtier_pool_used_bytes", {{"pool", "ddr"}}, m.ddr_bytes_used);
  e.sample("kvtier_pool_used_bytes", {{"pool", "int8"}}, m.int8_bytes_used);
  e.family("kvtier_pool_segment_bytes", "gauge", "Bytes of pool segments in /dev/shm, each reserved whole.");
  e.sample("kvtier_pool_segment_bytes", {{"pool", "ddr"}}, m.segment_bytes - m.int8_segment_bytes);
  e.sample("kvtier_pool_segment_bytes", {{"pool", "int8"}}, m.int8_segment_bytes);
  e.family("kvtier_clients", "gauge",
           "Engine clients: open, or closing (socket closed, process alive, pools still its own).");
  std::uint64_t closing = 0;
  for (const ClientMetrics& c : m.clients) closing += c.closing ? 1 : 0;
  e.sample("kvtier_clients", {{"state", "open"}}, m.clients.size() - closing);
  e.sample("kvtier_clients", {{"state", "closing"}}, closing);
  e.family("kvtier_pending_connections", "gauge", "Connections that have not completed Hello.");
  e.sample("kvtier_pending_connections", {}, m.pending_connections);
  e.family("kvtier_sessions_ended_total", "counter",
           "Sessions ended, by cause: disconnected, or the error code that ended them.");
  for (const auto& [cause, count] : m.sessions_ended) e.sample("kvtier_sessions_ended_total", {{"cause", cause}}, count);
  e.family("kvtier_client_reclaims_total", "counter", "Engine clients whose pools were freed once their process exited.");
  e.sample("kvtier_client_reclaims_total", {}, m.reclaims);
  e.family("kvtier_reattachments_total", "counter", "Clients that reattached their pools after a daemon restart.");
  e.sample("kvtier_reattachments_total", {}, m.reattachments);
  e.family("kvtier_orphan_pools", "gauge", "A predecessor's pool segments waiting for their client to reattach.");
  e.sample("kvtier_orphan_pools", {}, m.orphan_pools);
}

void token_families(Exposition& e, const NodeMetrics& m) {
  per_client(e, m, "kvtier_sequences", "gauge", "Open sequences.",
             [](const ClientMetrics& c) { return c.dynamic.sequences.size(); });
  e.family("kvtier_tokens", "gauge", "Tokens of the client's sequences per tier (t3: evicted so far).");
  for (const ClientMetrics& c : m.clients) {
    const std::array<std::uint64_t, 4> tokens = tier_tokens(c);
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      e.sample("kvtier_tokens", with(client_labels(c), "tier", std::string(kTierNames[t])), tokens[t]);
    }
  }
  // Host tiers only: what the engine allocates for T0 is the engine's to measure, not a count of
  // the daemon's.
  e.family("kvtier_tier_bytes", "gauge",
           "Bytes of the client's pool segments holding rows: t1 DDR rows (pending plans' destinations "
           "included), t2 int8 blocks. The segments themselves are kvtier_client_segment_bytes.");
  for (const ClientMetrics& c : m.clients) {
    e.sample("kvtier_tier_bytes", with(client_labels(c), "tier", "t1"), c.dynamic.ddr_bytes_used);
    e.sample("kvtier_tier_bytes", with(client_labels(c), "tier", "t2"), c.dynamic.int8_bytes_used);
  }
  per_client(e, m, "kvtier_client_segment_bytes", "gauge", "Bytes of the client's pool segments (DDR and int8).",
             [](const ClientMetrics& c) { return c.segment_bytes; });
  per_client(e, m, "kvtier_client_ddr_share_bytes", "gauge",
             "The client's weighted share of the node DDR budget.",
             [](const ClientMetrics& c) { return c.dynamic.ddr_share_bytes; });
}

void traffic_families(Exposition& e, const NodeMetrics& m) {
  per_client(e, m, "kvtier_score_records_total", "counter", "Score records read from the client's score ring.",
             [](const ClientMetrics& c) { return c.dynamic.score_records; });
  per_client(e, m, "kvtier_scores_dropped_total", "counter", "Score records the client dropped (its ring was full).",
             [](const ClientMetrics& c) { return c.dynamic.scores_dropped; });
  per_client(e, m, "kvtier_plans_sent_total", "counter", "Plans published.",
             [](const ClientMetrics& c) { return c.dynamic.plans_sent; });
  per_client(e, m, "kvtier_plans_acked_total", "counter", "Plans acknowledged as applied (committed).",
             [](const ClientMetrics& c) { return c.dynamic.plans_acked; });
  per_client(e, m, "kvtier_plans_failed_total", "counter", "Plans acknowledged as not applied (rolled back).",
             [](const ClientMetrics& c) { return c.dynamic.plans_failed; });
  for (const bool bytes : {false, true}) {
    const std::string_view name = bytes ? "kvtier_moved_bytes_total" : "kvtier_moves_total";
    e.family(name, "counter",
             bytes ? "Bytes committed plans wrote in the destination tier (native K+V of all layers into t0/t1, "
                     "int8 with scales into t2, none into t3)."
                   : "Token moves of committed plans, by direction.");
    for (const ClientMetrics& c : m.clients) {
      for (std::size_t from = 0; from < 3; ++from) {  // nothing leaves T3
        for (std::size_t to = 0; to < kTierNames.size(); ++to) {
          if (from == to) continue;
          const std::size_t i = PlanTraffic::direction(static_cast<tier::Tier>(from), static_cast<tier::Tier>(to));
          auto labels = with(with(client_labels(c), "from", std::string(kTierNames[from])), "to",
                             std::string(kTierNames[to]));
          e.sample(name, labels, bytes ? c.dynamic.traffic.bytes[i] : c.dynamic.traffic.moves[i]);
        }
      }
    }
  }
  e.family("kvtier_backpressure_tokens_total", "counter",
           "Tokens kept in T0 because no host row was free, by reason (pool_full: the client's segment; "
           "node_budget: the node DDR budget).");
  for (const ClientMetrics& c : m.clients) {
    const auto& bp = c.dynamic.traffic.backpressure_tokens;
    e.sample("kvtier_backpressure_tokens_total", with(client_labels(c), "reason", "pool_full"), bp[1]);
    e.sample("kvtier_backpressure_tokens_total", with(client_labels(c), "reason", "node_budget"), bp[2]);
  }
  e.family("kvtier_pressure_tokens_total", "counter",
           "Tokens given back to relieve node DDR pressure, by action (demote: to int8; evict: destroyed).");
  for (const ClientMetrics& c : m.clients) {
    e.sample("kvtier_pressure_tokens_total", with(client_labels(c), "action", "demote"), c.dynamic.pressure_demotions);
    e.sample("kvtier_pressure_tokens_total", with(client_labels(c), "action", "evict"), c.dynamic.pressure_evictions);
  }
  per_client(e, m, "kvtier_int8_trimmed_tokens_total", "counter",
             "T1 -> T2 moves dropped because the int8 pool was full (the tokens stayed in T1).",
             [](const ClientMetrics& c) { return c.dynamic.int8_trimmed; });
  per_client(e, m, "kvtier_client_errors_total", "counter", "Errors of the client's session and rings.",
             [](const ClientMetrics& c) { return c.errors; });
  e.family("kvtier_plan_roundtrip_seconds", "histogram",
           "From publishing a plan to reading the client's acknowledgement (applied or not).");
  for (const ClientMetrics& c : m.clients) {
    e.histogram("kvtier_plan_roundtrip_seconds", client_labels(c), c.dynamic.traffic.plan_roundtrip);
  }
  e.family("kvtier_decision_seconds", "histogram", "Time of one sequence's tier decision.");
  for (const ClientMetrics& c : m.clients) {
    e.histogram("kvtier_decision_seconds", client_labels(c), c.dynamic.traffic.decision);
  }
}

}  // namespace

std::string render_metrics(const NodeMetrics& metrics) {
  Exposition e;
  node_families(e, metrics);
  token_families(e, metrics);
  traffic_families(e, metrics);
  return e.take();
}

}  // namespace kvtier::daemon
