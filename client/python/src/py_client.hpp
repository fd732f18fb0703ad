// PyClient: the object behind kvtier.Client. It owns one kvtier::Client (kvtier.hpp, the C ABI's
// RAII layer) and turns every failed call into a StatusError (status + the handle's last_error
// text), which the module's
// exception translator raises as the matching kvtier.KvtierError subclass. It holds no Python
// objects, so its methods run with the GIL released (bind_client.cpp releases it).
//
// Thread-safety: a kvtier_client is used by one thread at a time; PyClient serialises its calls
// with a mutex so Python threads sharing one Client cannot break that rule.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kvtier/kvtier.hpp"
#include "kvtier/protocol/tier_param_table.hpp"

namespace kvtier::python {

// A failed C ABI call: the status and the library's description of it.
class StatusError : public std::runtime_error {
 public:
  StatusError(kvtier_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  kvtier_status status() const noexcept { return status_; }

 private:
  kvtier_status status_;
};

// A polled plan with its moves copied out of the library's buffer (valid until the next poll
// there), so it stays usable for as long as Python holds it.
struct Plan {
  std::uint64_t epoch = 0;
  std::uint32_t sequence = 0;
  std::vector<kvtier_plan_move> moves;
};

// One layer's staged T1 rows. K and V live in the caller's buffer at the given byte offsets,
// each [rows, num_kv_heads, head_dim] in the registered dtype.
struct StagedLayer {
  std::uint32_t layer = 0;
  std::size_t rows = 0;
  std::vector<std::uint32_t> positions;
  std::size_t k_offset = 0;
  std::size_t v_offset = 0;
};

// Tier parameters of kvtier_sequence_open_with; unset fields keep the paper's defaults, and a
// sequence with no field set uses the daemon's configured defaults. The numbers are the tier
// parameter table's (protocol/tier_param_table.hpp), each as its C type.
struct SequenceParams {
#define KVTIER_PY_FIELD(name, Wire, Type, value, range, help) std::optional<Type> name;
  KVTIER_TIER_NUMBERS(KVTIER_PY_FIELD)
#undef KVTIER_PY_FIELD
  // The table's choices.
  std::optional<kvtier_eviction_mode> mode;
  std::optional<kvtier_policy> policy;
  std::optional<bool> protect_prompt;
  // Not tier parameters (kept with the daemon's defaults): r_kv's digest width, and the tokens one
  // position stands for.
  std::optional<std::uint32_t> key_digest_dim, tokens_per_position;
};

// kvtier_kv_layout with owned pointer arrays.
struct KvLayout {
  std::uint32_t num_kv_heads = 0, head_dim = 0, num_slots = 0, block_size = 0;
  kvtier_dtype dtype = KVTIER_DTYPE_F32;
  std::size_t token_stride = 0, head_stride = 0, block_stride = 0;
  std::vector<std::uintptr_t> k_base, v_base;
  kvtier_backend backend = KVTIER_BACKEND_CPU;
};

struct SequenceInfo {
  std::uint32_t sequence_id, prompt_length, tokens, tokens_t0, tokens_t1, tokens_t2, tokens_t3;
  double destroyed_fraction, hbm_ratio, evict_ratio;
  kvtier_eviction_mode mode;
  double int8_ratio;
  kvtier_handoff handoff;
};

struct ClientInfo {
  std::uint32_t client_id, pid, uid;
  std::string name, model_name;
  std::uint32_t num_layers, num_kv_heads, head_dim;
  kvtier_dtype dtype;
  std::uint32_t pool_slots, pool_slots_used;
  std::uint64_t score_records, scores_dropped, plans_sent, plans_acked, errors;
  std::vector<SequenceInfo> sequences;
  std::uint64_t backpressure_tokens = 0;
  std::uint32_t weight = 0;
  std::uint64_t ddr_bytes_used = 0, ddr_share_bytes = 0;
  std::uint32_t int8_slots = 0, int8_slots_used = 0;
  std::uint64_t t2_demotions = 0, pressure_demotions = 0, pressure_evictions = 0, int8_trimmed = 0;
  kvtier_backpressure last_backpressure = KVTIER_BACKPRESSURE_NONE;
  bool closing = false;
};

struct DaemonStatus {
  std::string daemon_version;
  std::uint64_t daemon_epoch, uptime_seconds, ddr_bytes_total, ddr_bytes_used;
  std::vector<ClientInfo> clients;
  std::uint64_t int8_bytes_total = 0, int8_bytes_used = 0;
  std::string metrics_address;  // empty: metrics off
};

// kvtier_event and kvtier_daemon_events, copied out.
struct Event {
  std::uint64_t sequence, unix_ms;
  kvtier_event_kind kind;
  std::uint32_t client_id;
  std::string client_name;
  std::uint32_t sequence_id;
  std::uint64_t tokens;
  std::string detail;
};
struct DaemonEvents {
  std::vector<Event> events;  // oldest first
  std::uint32_t capacity;
  std::uint64_t recorded;
};

// A sequence's whole committed placement: every page of kvtier_sequence_placement_get joined.
struct Placement {
  std::uint32_t length = 0;
  std::vector<std::pair<kvtier_tier, std::uint32_t>> runs;  // (tier, positions), in position order
};

class PyClient {
 public:
  // Connects and performs the handshake. On failure throws StatusError; for a version mismatch
  // its message names both sides' versions.
  PyClient(const std::optional<std::string>& socket_path, const std::optional<std::string>& name, kvtier_role role);
  ~PyClient();
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  // Frees the handle; every later call raises bad_state. Idempotent.
  void close();
  bool closed() const;

  kvtier_versions versions();
  void register_model(std::uint32_t num_layers, std::uint32_t num_kv_heads, std::uint32_t head_dim, kvtier_dtype dtype,
                      std::uint32_t pool_tokens, const std::optional<std::string>& model_name,
                      std::uint32_t int8_pool_tokens, std::uint32_t weight);
  std::uint32_t open_sequence(std::uint32_t prompt_length, const SequenceParams& params);
  void close_sequence(std::uint32_t sequence);
  void push_scores(std::uint32_t sequence, std::uint32_t step, std::uint32_t first_position,
                   std::span<const float> values);
  void push_features(std::uint32_t sequence, kvtier_feature feature, std::uint32_t first_position,
                     std::span<const float> values);
  void step_end(std::uint32_t sequence, std::uint32_t step);
  // nullopt when no plan arrived within timeout_ms (0: poll, < 0: wait forever).
  std::optional<Plan> poll_plan(int timeout_ms);
  void ack_plan(std::uint64_t epoch, bool applied);
  bool sync(int timeout_ms);
  void attach_cache(std::uint32_t sequence, const KvLayout& layout);
  void execute_plan(const Plan& plan, std::span<const std::uint32_t> hbm_slots);
  // (rows, bytes) that stage_layer needs now.
  std::pair<std::size_t, std::size_t> t1_rows(std::uint32_t sequence);
  StagedLayer stage_layer(std::uint32_t sequence, std::uint32_t layer, kvtier_staging_order order, void* buffer,
                          std::size_t capacity);
  // Layer-wise double buffering: the library writes into `buffer` from stage_prefetch until the
  // matching stage_wait (the caller keeps it alive); stage_wait's offsets are relative to `buffer`,
  // the address given to the prefetch.
  void stage_prefetch(std::uint32_t sequence, std::uint32_t layer, kvtier_staging_order order, void* buffer,
                      std::size_t capacity);
  StagedLayer stage_wait(std::uint32_t sequence, std::uint32_t layer, const void* buffer);
  void set_stream(std::uint32_t sequence, std::uintptr_t stream);
  // kvtier_stage_layer_at: the layer's host rows straight to their positions in host memory.
  void stage_at(std::uint32_t sequence, std::uint32_t layer, const kvtier_stage_target& target);
  void attend(std::uint32_t sequence, std::uint32_t layer, const kvtier_attention& attention);
  // Sequence hand-off: the token an adopter presents / the adopted sequence.
  std::uint64_t export_sequence(std::uint32_t sequence, const kvtier_export_buffer& buffer,
                                std::span<const std::uint32_t> t0_positions, std::span<const std::uint32_t> t0_slots);
  kvtier_adopted adopt_sequence(std::uint64_t token);
  kvtier_client_counters counters();
  DaemonStatus daemon_status();
  DaemonEvents daemon_events(std::uint32_t limit);
  Placement placement(std::uint32_t client_id, std::uint32_t sequence_id);
  std::string last_error();

 private:
  Client& open_client(const char* what);  // mu_ held; throws bad_state when closed
  void check(kvtier_status status);      // mu_ held; throws the status with the handle's detail

  mutable std::mutex mu_;
  Client client_;  // empty once closed
};

}  // namespace kvtier::python
