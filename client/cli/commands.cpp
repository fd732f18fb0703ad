#include "commands.hpp"

#include <cstdio>

#include "json_writer.hpp"
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

const char* backpressure_name(kvtier_backpressure reason) {
  switch (reason) {
    case KVTIER_BACKPRESSURE_NONE: return "none";
    case KVTIER_BACKPRESSURE_POOL_FULL: return "pool_full";
    case KVTIER_BACKPRESSURE_NODE_BUDGET: return "node_budget";
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

unsigned long long ull(std::uint64_t v) { return static_cast<unsigned long long>(v); }

int exit_code_for(kvtier_status status) {
  switch (status) {
    case KVTIER_OK: return kExitOk;
    case KVTIER_E_UNAVAILABLE: return kExitUnreachable;
    case KVTIER_E_VERSION_MISMATCH: return kExitVersionMismatch;
    default: return kExitFailed;
  }
}

int report(kvtier_status status, const Client& client) {
  const std::string why = printable(client ? client.last_error() : std::string(kvtier_client_last_error(nullptr)));
  std::fprintf(stderr, "kvtierctl: %s: %s\n", kvtier_status_string(status), why.c_str());
  return exit_code_for(status);
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

void write_versions_json(JsonWriter& j, const kvtier_versions& v) {
  j.begin_object();
  j.key("client").begin_object();
  j.key("protocol_major").value(std::uint64_t{v.client_protocol_major});
  j.key("protocol_minor").value(std::uint64_t{v.client_protocol_minor});
  j.key("layout_version").value(std::uint64_t{v.client_layout_version});
  j.key("layout_fingerprint").value(std::uint64_t{v.client_layout_fingerprint});
  j.end_object();
  j.key("daemon").begin_object();
  j.key("version").value(v.daemon_version);
  j.key("protocol_major").value(std::uint64_t{v.daemon_protocol_major});
  j.key("protocol_minor").value(std::uint64_t{v.daemon_protocol_minor});
  j.key("layout_version").value(std::uint64_t{v.daemon_layout_version});
  j.key("layout_fingerprint").value(std::uint64_t{v.daemon_layout_fingerprint});
  j.end_object();
  j.end_object();
}

int run_version(const GlobalOptions& options) {
  Client client;
  const kvtier_status status = client.connect(options.socket_path, "kvtierctl", KVTIER_ROLE_ADMIN);
  kvtier_versions v{};
  if (client) client.versions(v);
  if (status != KVTIER_OK && status != KVTIER_E_VERSION_MISMATCH) return report(status, client);
  if (options.json) {
    JsonWriter j;
    write_versions_json(j, v);
    std::printf("%s\n", j.str().c_str());
  } else {
    print_versions_text(v, true);
  }
  return status == KVTIER_OK ? kExitOk : report(status, client);
}

void write_status_json(const kvtier_daemon_status& s) {
  JsonWriter j;
  j.begin_object();
  j.key("daemon_version").value(s.daemon_version);
  j.key("daemon_epoch").value(s.daemon_epoch);
  j.key("uptime_seconds").value(s.uptime_seconds);
  j.key("pools").begin_object();
  j.key("ddr_bytes_total").value(s.ddr_bytes_total);
  j.key("ddr_bytes_used").value(s.ddr_bytes_used);
  j.key("int8_bytes_total").value(s.int8_bytes_total);
  j.key("int8_bytes_used").value(s.int8_bytes_used);
  j.end_object();
  j.key("clients").begin_array();
  for (std::size_t i = 0; i < s.client_count; ++i) {
    const kvtier_client_info& c = s.clients[i];
    j.begin_object();
    j.key("client_id").value(std::uint64_t{c.client_id});
    j.key("pid").value(std::uint64_t{c.pid});
    j.key("uid").value(std::uint64_t{c.uid});
    j.key("name").value(c.name);
    j.key("model").begin_object();
    j.key("name").value(c.model_name);
    j.key("num_layers").value(std::uint64_t{c.num_layers});
    j.key("num_kv_heads").value(std::uint64_t{c.num_kv_heads});
    j.key("head_dim").value(std::uint64_t{c.head_dim});
    j.key("dtype").value(dtype_name(c.dtype));
    j.end_object();
    j.key("pool_slots").value(std::uint64_t{c.pool_slots});
    j.key("pool_slots_used").value(std::uint64_t{c.pool_slots_used});
    j.key("weight").value(std::uint64_t{c.weight});
    j.key("ddr_bytes_used").value(c.ddr_bytes_used);
    j.key("ddr_share_bytes").value(c.ddr_share_bytes);
    j.key("int8_slots").value(std::uint64_t{c.int8_slots});
    j.key("int8_slots_used").value(std::uint64_t{c.int8_slots_used});
    j.key("last_backpressure").value(backpressure_name(c.last_backpressure));
    j.key("closing").value(c.closing != 0);
    j.key("counters").begin_object();
    j.key("score_records").value(c.score_records);
    j.key("scores_dropped").value(c.scores_dropped);
    j.key("plans_sent").value(c.plans_sent);
    j.key("plans_acked").value(c.plans_acked);
    j.key("errors").value(c.errors);
    j.key("plans_failed").value(c.plans_failed);
    j.key("moves_sent").value(c.moves_sent);
    j.key("t2_demotions").value(c.t2_demotions);
    j.key("pressure_demotions").value(c.pressure_demotions);
    j.key("pressure_evictions").value(c.pressure_evictions);
    j.key("int8_trimmed").value(c.int8_trimmed);
    j.key("backpressure_tokens").value(c.backpressure_tokens);
    j.end_object();
    j.key("sequences").begin_array();
    for (std::size_t k = 0; k < c.sequence_count; ++k) {
      const kvtier_sequence_info& q = c.sequences[k];
      j.begin_object();
      j.key("sequence_id").value(std::uint64_t{q.sequence_id});
      j.key("prompt_length").value(std::uint64_t{q.prompt_length});
      j.key("tokens").value(std::uint64_t{q.tokens});
      j.key("t0").value(std::uint64_t{q.tokens_t0});
      j.key("t1").value(std::uint64_t{q.tokens_t1});
      j.key("t2").value(std::uint64_t{q.tokens_t2});
      j.key("t3").value(std::uint64_t{q.tokens_t3});
      j.key("destroyed_fraction").value(q.destroyed_fraction);
      j.key("hbm_ratio").value(q.hbm_ratio);
      j.key("evict_ratio").value(q.evict_ratio);
      j.key("int8_ratio").value(q.int8_ratio);
      j.key("eviction_mode").value(mode_name(q.mode));
      j.key("policy").value(policy_name(q.policy));
      if (q.handoff != KVTIER_HANDOFF_NONE) j.key("handoff").value(handoff_name(q.handoff));
      j.end_object();
    }
    j.end_array();
    j.end_object();
  }
  j.end_array();
  j.end_object();
  std::printf("%s\n", j.str().c_str());
}

void print_status_text(const kvtier_daemon_status& s) {
  std::printf("kvtierd %s  epoch %016llx  up %llus  DDR pools %llu bytes in use", printable(s.daemon_version).c_str(),
              ull(s.daemon_epoch),
              ull(s.uptime_seconds), ull(s.ddr_bytes_used));
  if (s.ddr_bytes_total != 0) std::printf(" of %llu", ull(s.ddr_bytes_total));
  std::printf("  int8 pools %llu", ull(s.int8_bytes_used));
  if (s.int8_bytes_total != 0) std::printf(" of %llu", ull(s.int8_bytes_total));
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

int run_status(const GlobalOptions& options) {
  Client client;
  kvtier_status status = client.connect(options.socket_path, "kvtierctl", KVTIER_ROLE_ADMIN);
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
    {"status", "pools, clients (pid, name) and sequences with token counts per tier", run_status},
    {"version", "client and daemon protocol and shared-memory layout versions", run_version},
};

}  // namespace

std::span<const Command> commands() { return kCommands; }

}  // namespace kvtier::cli
