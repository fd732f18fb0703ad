#include "commands.hpp"

#include <cstdio>

#include "ctl_support.hpp"
#include "kvtier/kvtier.hpp"
#include "safe_text.hpp"

namespace kvtier::cli {
namespace {

const char* dtype_name(kvtier_dtype dtype) {
  switch (dtype) {
    case KVTIER_DTYPE_F16: return "f16";
    case KVTIER_DTYPE_BF16: return "bf16";
    case KVTIER_DTYPE_F32: return "f32";
  }
  return "?";
}

const char* mode_name(kvtier_eviction_mode mode) {
  switch (mode) {
    case KVTIER_EVICT_CUMULATIVE: return "cumulative";
    case KVTIER_EVICT_PAPER_ALGORITHM: return "paper-algorithm";
    case KVTIER_EVICT_PAPER_PROTOTYPE: return "paper-prototype";
  }
  return "?";
}

const char* policy_name(kvtier_policy policy) {
  switch (policy) {
    case KVTIER_POLICY_PAPER: return "paper";
    case KVTIER_POLICY_H2O: return "h2o";
    case KVTIER_POLICY_STREAMING_LLM: return "streaming_llm";
    case KVTIER_POLICY_RANDOM: return "random";
    case KVTIER_POLICY_VASE: return "vase";
    case KVTIER_POLICY_R_KV: return "r_kv";
  }
  return "?";
}

const char* handoff_name(kvtier_handoff handoff) {
  switch (handoff) {
    case KVTIER_HANDOFF_NONE: return "none";
    case KVTIER_HANDOFF_EXPORTED: return "exported";
    case KVTIER_HANDOFF_ADOPTING: return "adopting";
    case KVTIER_HANDOFF_HANDED_OFF: return "handed_off";
    case KVTIER_HANDOFF_ADOPTED: return "adopted";
  }
  return "?";
}

void print_versions_text(const kvtier_versions& v, bool daemon_known) {
  std::printf("client  protocol %u.%u  layout %u (fingerprint %016llx)\n", v.client_protocol_major,
              v.client_protocol_minor, v.client_layout_version,
              static_cast<unsigned long long>(v.client_layout_fingerprint));
  if (daemon_known) {
    std::printf("daemon  protocol %u.%u  layout %u (fingerprint %016llx)  kvtierd %s\n", v.daemon_protocol_major,
                v.daemon_protocol_minor, v.daemon_layout_version,
                static_cast<unsigned long long>(v.daemon_layout_fingerprint), printable(v.daemon_version).c_str());
  }
}

// The --json document of `version` (docs/kvtierctl-json.md).
Json versions_json(const kvtier_versions& v) {
  return Json{{"client",
               {{"protocol_major", v.client_protocol_major},
                {"protocol_minor", v.client_protocol_minor},
                {"layout_version", v.client_layout_version},
                {"layout_fingerprint", v.client_layout_fingerprint}}},
              {"daemon",
               {{"version", v.daemon_version},
                {"protocol_major", v.daemon_protocol_major},
                {"protocol_minor", v.daemon_protocol_minor},
                {"layout_version", v.daemon_layout_version},
                {"layout_fingerprint", v.daemon_layout_fingerprint}}}};
}

int run_version(const GlobalOptions& options, std::span<const std::string_view> args) {
  if (!args.empty()) return usage_error("version", "takes no arguments");
  Client client;
  const kvtier_status status = connect_admin(options, client);
  kvtier_versions v{};
  if (client) client.versions(v);
  if (status != KVTIER_OK && status != KVTIER_E_VERSION_MISMATCH) return report(status, client);
  if (options.json) {
    print_json(versions_json(v));
  } else {
    print_versions_text(v, true);
  }
  return status == KVTIER_OK ? kExitOk : report(status, client);
}

// The --json document of `status` (docs/kvtierctl-json.md).
void write_status_json(const kvtier_daemon_status& s) {
  Json clients = Json::array();
  for (std::size_t i = 0; i < s.client_count; ++i) {
    const kvtier_client_info& c = s.clients[i];
    Json sequences = Json::array();
    for (std::size_t k = 0; k < c.sequence_count; ++k) {
      const kvtier_sequence_info& q = c.sequences[k];
      Json sequence = {{"sequence_id", q.sequence_id},
                       {"prompt_length", q.prompt_length},
                       {"tokens", q.tokens},
                       {"t0", q.tokens_t0},
                       {"t1", q.tokens_t1},
                       {"t2", q.tokens_t2},
                       {"t3", q.tokens_t3},
                       {"destroyed_fraction", q.destroyed_fraction},
                       {"hbm_ratio", q.hbm_ratio},
                       {"evict_ratio", q.evict_ratio},
                       {"int8_ratio", q.int8_ratio},
                       {"eviction_mode", mode_name(q.mode)},
                       {"policy", policy_name(q.policy)}};
      if (q.handoff != KVTIER_HANDOFF_NONE) sequence["handoff"] = handoff_name(q.handoff);
      sequences.push_back(std::move(sequence));
    }
    clients.push_back({{"client_id", c.client_id},
                       {"pid", c.pid},
                       {"uid", c.uid},
                       {"name", c.name},
                       {"model",
                        {{"name", c.model_name},
                         {"num_layers", c.num_layers},
                         {"num_kv_heads", c.num_kv_heads},
                         {"head_dim", c.head_dim},
                         {"dtype", dtype_name(c.dtype)}}},
                       {"pool_slots", c.pool_slots},
                       {"pool_slots_used", c.pool_slots_used},
                       {"weight", c.weight},
                       {"ddr_bytes_used", c.ddr_bytes_used},
                       {"ddr_share_bytes", c.ddr_share_bytes},
                       {"int8_slots", c.int8_slots},
                       {"int8_slots_used", c.int8_slots_used},
                       {"last_backpressure", backpressure_name(c.last_backpressure)},
                       {"closing", c.closing != 0},
                       {"counters",
                        {{"score_records", c.score_records},
                         {"scores_dropped", c.scores_dropped},
                         {"plans_sent", c.plans_sent},
                         {"plans_acked", c.plans_acked},
                         {"errors", c.errors},
                         {"plans_failed", c.plans_failed},
                         {"moves_sent", c.moves_sent},
                         {"t2_demotions", c.t2_demotions},
                         {"pressure_demotions", c.pressure_demotions},
                         {"pressure_evictions", c.pressure_evictions},
                         {"int8_trimmed", c.int8_trimmed},
                         {"backpressure_tokens", c.backpressure_tokens}}},
                       {"sequences", std::move(sequences)}});
  }
  print_json(Json{{"daemon_version", s.daemon_version},
                  {"daemon_epoch", s.daemon_epoch},
                  {"uptime_seconds", s.uptime_seconds},
                  {"pools",
                   {{"ddr_bytes_total", s.ddr_bytes_total},
                    {"ddr_bytes_used", s.ddr_bytes_used},
                    {"int8_bytes_total", s.int8_bytes_total},
                    {"int8_bytes_used", s.int8_bytes_used}}},
                  {"metrics_address", s.metrics_address},
                  {"clients", std::move(clients)}});
}

void print_status_text(const kvtier_daemon_status& s) {
  std::printf("kvtierd %s  epoch %016llx  up %llus  DDR pools %llu bytes in use", printable(s.daemon_version).c_str(),
              ull(s.daemon_epoch),
              ull(s.uptime_seconds), ull(s.ddr_bytes_used));
  if (s.ddr_bytes_total != 0) std::printf(" of %llu", ull(s.ddr_bytes_total));
  std::printf("  int8 pools %llu", ull(s.int8_bytes_used));
  if (s.int8_bytes_total != 0) std::printf(" of %llu", ull(s.int8_bytes_total));
  if (s.metrics_address[0] != '\0') std::printf("\nmetrics at http://%s/metrics", printable(s.metrics_address).c_str());
  std::printf("\n%zu client(s)\n", s.client_count);
  for (std::size_t i = 0; i < s.client_count; ++i) {
    const kvtier_client_info& c = s.clients[i];
    // Names are the clients' own: escaped, so none can move the cursor or start a line.
    const std::string name = printable(c.name), model = c.model_name[0] != '\0' ? printable(c.model_name) : "-";
    std::printf("\nclient %u  %s  pid %u uid %u  model %s (%u layers, %u kv heads, dim %u, %s)%s\n", c.client_id,
                name.c_str(), c.pid, c.uid, model.c_str(), c.num_layers, c.num_kv_heads, c.head_dim, dtype_name(c.dtype),
                c.closing != 0 ? "  closing: disconnected, pools held until the process exits" : "");
    std::printf("  pool slots %u/%u  score records %llu (dropped %llu)  plans %llu sent, %llu acked, %llu failed"
                "  moves %llu  errors %llu\n",
                c.pool_slots_used, c.pool_slots, ull(c.score_records), ull(c.scores_dropped), ull(c.plans_sent),
                ull(c.plans_acked), ull(c.plans_failed), ull(c.moves_sent), ull(c.errors));
    std::printf("  weight %u  DDR %llu bytes used", c.weight, ull(c.ddr_bytes_used));
    if (c.ddr_share_bytes != 0) std::printf(" (share %llu)", ull(c.ddr_share_bytes));
    std::printf("  int8 slots %u/%u  T2 demotions %llu (int8 full: %llu trimmed)  pressure: %llu demoted, %llu evicted"
                "  kept in HBM %llu (last: %s)\n",
                c.int8_slots_used, c.int8_slots, ull(c.t2_demotions), ull(c.int8_trimmed), ull(c.pressure_demotions),
                ull(c.pressure_evictions), ull(c.backpressure_tokens), backpressure_name(c.last_backpressure));
    std::printf("  %8s %7s %7s %7s %7s %7s %7s %9s %5s %5s %5s %s\n", "sequence", "prompt", "tokens", "T0", "T1", "T2",
                "T3", "destroyed", "beta", "r", "int8", "policy / mode");
    for (std::size_t k = 0; k < c.sequence_count; ++k) {
      const kvtier_sequence_info& q = c.sequences[k];
      std::printf("  %8u %7u %7u %7u %7u %7u %7u %8.1f%% %5.2f %5.2f %5.2f %s / %s", q.sequence_id, q.prompt_length,
                  q.tokens, q.tokens_t0, q.tokens_t1, q.tokens_t2, q.tokens_t3, 100.0 * q.destroyed_fraction,
                  q.hbm_ratio, q.evict_ratio, q.int8_ratio, policy_name(q.policy), mode_name(q.mode));
      if (q.handoff != KVTIER_HANDOFF_NONE) std::printf("  hand-off: %s", handoff_name(q.handoff));
      std::printf("\n");
    }
  }
}

int run_status(const GlobalOptions& options, std::span<const std::string_view> args) {
  if (!args.empty()) return usage_error("status", "takes no arguments");
  Client client;
  kvtier_status status = connect_admin(options, client);
  if (status != KVTIER_OK) return report(status, client);
  DaemonStatusPtr snapshot;
  status = client.daemon_status(snapshot);
  if (status != KVTIER_OK) return report(status, client);
  if (options.json) {
    write_status_json(*snapshot);
  } else {
    print_status_text(*snapshot);
  }
  return kExitOk;
}

constexpr Command kCommands[] = {
    {"status", "", "pools, clients (pid, name) and sequences with token counts per tier", run_status},
    {"events", "[N]", "the newest N (default 20) pressure, backpressure, reclaim and error decisions", run_events},
    {"sequence", "CLIENT SEQ [--width N] [--page-runs N]",
     "one sequence's placement: a strip of positions by tier, per-tier counts", run_sequence},
    {"top", "[--interval MS] [--once]", "live view of clients and sequences by DDR use, with rates; q quits", run_top},
    {"version", "", "client and daemon protocol and shared-memory layout versions", run_version},
};

}  // namespace

std::span<const Command> commands() { return kCommands; }

}  // namespace kvtier::cli
