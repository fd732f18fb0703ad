#include "py_client.hpp"

#include <chrono>
#include <cstddef>
#include <cstring>
#include <span>

namespace kvtier::python {
namespace {

// The library's view of staged rows (valid until its next stage call) copied out, with K and V as
// byte offsets into `buffer`, the caller's staging buffer.
std::span<std::byte> bytes_at(void* buffer, std::size_t capacity) {
  return {static_cast<std::byte*>(buffer), capacity};
}

StagedLayer to_staged(const kvtier_staged_layer& staged, const void* buffer) {
  StagedLayer out;
  out.layer = staged.layer;
  out.rows = staged.rows;
  out.positions.assign(staged.positions, staged.positions + staged.rows);
  const auto base = reinterpret_cast<std::uintptr_t>(buffer);
  out.k_offset = staged.rows == 0 ? 0 : reinterpret_cast<std::uintptr_t>(staged.k) - base;
  out.v_offset = staged.rows == 0 ? 0 : reinterpret_cast<std::uintptr_t>(staged.v) - base;
  return out;
}

}  // namespace

PyClient::PyClient(const std::optional<std::string>& socket_path, const std::optional<std::string>& name,
                   kvtier_role role) {
  const kvtier_status status = client_.connect(socket_path.value_or(""), name.value_or(""), role);
  if (status == KVTIER_OK) return;
  // The handle is empty (then the thread's detail is read) or, on a version mismatch, kept so the
  // detail names both sides' versions.
  const std::string message = client_.last_error();
  client_.close();
  throw StatusError(status, message);
}

PyClient::~PyClient() { close(); }

void PyClient::close() {
  std::lock_guard lock(mu_);
  client_.close();
}

bool PyClient::closed() const {
  std::lock_guard lock(mu_);
  return !client_;
}

Client& PyClient::open_client(const char* what) {
  if (!client_) throw StatusError(KVTIER_E_BAD_STATE, std::string(what) + " on a closed client");
  return client_;
}

void PyClient::check(kvtier_status status) {
  if (status != KVTIER_OK) throw StatusError(status, client_.last_error());
}

kvtier_versions PyClient::versions() {
  std::lock_guard lock(mu_);
  kvtier_versions out{};
  out.struct_size = sizeof(out);
  check(open_client("versions").versions(out));
  return out;
}

void PyClient::register_model(std::uint32_t num_layers, std::uint32_t num_kv_heads, std::uint32_t head_dim,
                              kvtier_dtype dtype, std::uint32_t pool_tokens,
                              const std::optional<std::string>& model_name, std::uint32_t int8_pool_tokens,
                              std::uint32_t weight) {
  std::lock_guard lock(mu_);
  kvtier_model_geometry geometry;
  kvtier_model_geometry_init(&geometry);
  geometry.num_layers = num_layers;
  geometry.num_kv_heads = num_kv_heads;
  geometry.head_dim = head_dim;
  geometry.dtype = dtype;
  geometry.pool_tokens = pool_tokens;
  geometry.model_name = model_name ? model_name->c_str() : nullptr;
  geometry.int8_pool_tokens = int8_pool_tokens;
  geometry.weight = weight;
  check(open_client("register_model").register_model(geometry));
}

std::uint32_t PyClient::open_sequence(std::uint32_t prompt_length, const SequenceParams& p) {
  std::lock_guard lock(mu_);
  kvtier_sequence_options o;
  kvtier_sequence_options_init(&o);
  o.prompt_length = prompt_length;
  bool any = p.mode || p.policy || p.protect_prompt || p.key_digest_dim;
#define KVTIER_PY_APPLY(name, Wire, Type, value, range, help) \
  any = any || p.name.has_value();                          \
  o.name = p.name.value_or(o.name);
  KVTIER_TIER_NUMBERS(KVTIER_PY_APPLY)
#undef KVTIER_PY_APPLY
  o.use_defaults = any ? 0 : 1;
  o.mode = p.mode.value_or(o.mode);
  o.policy = p.policy.value_or(o.policy);
  if (p.protect_prompt) o.protect_prompt = *p.protect_prompt ? 1 : 0;
  o.key_digest_dim = p.key_digest_dim.value_or(o.key_digest_dim);
  o.tokens_per_position = p.tokens_per_position.value_or(o.tokens_per_position);
  std::uint32_t sequence = 0;
  check(open_client("open_sequence").open_sequence(o, sequence));
  return sequence;
}

void PyClient::close_sequence(std::uint32_t sequence) {
  std::lock_guard lock(mu_);
  check(open_client("close_sequence").close_sequence(sequence));
}

void PyClient::push_scores(std::uint32_t sequence, std::uint32_t step, std::uint32_t first_position,
                           std::span<const float> values) {
  std::lock_guard lock(mu_);
  check(open_client("push_scores").push_scores(sequence, step, first_position, values));
}

void PyClient::push_features(std::uint32_t sequence, kvtier_feature feature, std::uint32_t first_position,
                              std::span<const float> values) {
  std::lock_guard lock(mu_);
  check(open_client("push_features").push_feature(sequence, feature, first_position, values));
}

void PyClient::step_end(std::uint32_t sequence, std::uint32_t step) {
  std::lock_guard lock(mu_);
  check(open_client("step_end").step_end(sequence, step));
}

std::optional<Plan> PyClient::poll_plan(int timeout_ms) {
  std::lock_guard lock(mu_);
  kvtier_plan plan{};
  const auto st = open_client("poll_plan").poll_plan(std::chrono::milliseconds(timeout_ms), plan);
  if (st == KVTIER_E_TIMEOUT) return std::nullopt;
  check(st);
  Plan out{plan.epoch, plan.sequence, {}};
  out.moves.assign(plan.moves, plan.moves + plan.move_count);
  return out;
}

void PyClient::ack_plan(std::uint64_t epoch, bool applied) {
  std::lock_guard lock(mu_);
  check(open_client("ack_plan").ack_plan(epoch, applied));
}

bool PyClient::sync(int timeout_ms) {
  std::lock_guard lock(mu_);
  const auto st = open_client("sync").sync(std::chrono::milliseconds(timeout_ms));
  if (st == KVTIER_E_TIMEOUT) return false;
  check(st);
  return true;
}

void PyClient::attach_cache(std::uint32_t sequence, const KvLayout& l) {
  std::lock_guard lock(mu_);
  kvtier_kv_layout layout;
  kvtier_kv_layout_init(&layout);
  if (l.k_base.size() != l.v_base.size()) {
    throw StatusError(KVTIER_E_INVALID_ARGUMENT, "k_base and v_base need one pointer per layer each");
  }
  layout.num_layers = static_cast<std::uint32_t>(l.k_base.size());
  layout.num_kv_heads = l.num_kv_heads;
  layout.head_dim = l.head_dim;
  layout.dtype = l.dtype;
  layout.num_slots = l.num_slots;
  layout.block_size = l.block_size;
  layout.token_stride = l.token_stride;
  layout.head_stride = l.head_stride;
  layout.block_stride = l.block_stride;
  layout.k_base = l.k_base.data();
  layout.v_base = l.v_base.data();
  layout.backend = l.backend;
  check(open_client("attach_cache").attach_cache(sequence, layout));
}

void PyClient::execute_plan(const Plan& plan, std::span<const std::uint32_t> hbm_slots) {
  std::lock_guard lock(mu_);
  Client& client = open_client("execute_plan");
  if (hbm_slots.size() != plan.moves.size()) {
    throw StatusError(KVTIER_E_INVALID_ARGUMENT, "hbm_slots has " + std::to_string(hbm_slots.size()) +
                                                     " entries, the plan " + std::to_string(plan.moves.size()) +
                                                     " moves");
  }
  const kvtier_plan c_plan{plan.epoch, plan.sequence, plan.moves.size(), plan.moves.data()};
  check(client.execute_plan(c_plan, hbm_slots));
}

std::pair<std::size_t, std::size_t> PyClient::t1_rows(std::uint32_t sequence) {
  std::lock_guard lock(mu_);
  std::size_t rows = 0, bytes = 0;
  check(open_client("t1_rows").t1_rows(sequence, rows, bytes));
  return {rows, bytes};
}

StagedLayer PyClient::stage_layer(std::uint32_t sequence, std::uint32_t layer, kvtier_staging_order order,
                                  void* buffer, std::size_t capacity) {
  std::lock_guard lock(mu_);
  kvtier_staged_layer staged{};
  check(open_client("stage_layer").stage_layer(sequence, layer, order, bytes_at(buffer, capacity), staged));
  return to_staged(staged, buffer);
}

void PyClient::stage_prefetch(std::uint32_t sequence, std::uint32_t layer, kvtier_staging_order order, void* buffer,
                              std::size_t capacity) {
  std::lock_guard lock(mu_);
  check(open_client("stage_prefetch").stage_prefetch(sequence, layer, order, bytes_at(buffer, capacity)));
}

StagedLayer PyClient::stage_wait(std::uint32_t sequence, std::uint32_t layer, const void* buffer) {
  std::lock_guard lock(mu_);
  kvtier_staged_layer staged{};
  check(open_client("stage_wait").stage_wait(sequence, layer, staged));
  return to_staged(staged, buffer);
}

void PyClient::stage_at(std::uint32_t sequence, std::uint32_t layer, const kvtier_stage_target& target) {
  std::lock_guard lock(mu_);
  check(open_client("stage_at").stage_layer_at(sequence, layer, target));
}

void PyClient::attend(std::uint32_t sequence, std::uint32_t layer, const kvtier_attention& attention) {
  std::lock_guard lock(mu_);
  check(open_client("attend").attend(sequence, layer, attention));
}

void PyClient::set_stream(std::uint32_t sequence, std::uintptr_t stream) {
  std::lock_guard lock(mu_);
  check(open_client("set_stream").set_stream(sequence, stream));
}

std::uint64_t PyClient::export_sequence(std::uint32_t sequence, const kvtier_export_buffer& buffer,
                                        std::span<const std::uint32_t> t0_positions,
                                        std::span<const std::uint32_t> t0_slots) {
  std::lock_guard lock(mu_);
  Client& client = open_client("export_sequence");
  if (t0_positions.size() != t0_slots.size()) {
    throw StatusError(KVTIER_E_INVALID_ARGUMENT, "t0_positions has " + std::to_string(t0_positions.size()) +
                                                     " entries, t0_slots " + std::to_string(t0_slots.size()));
  }
  std::uint64_t token = 0;
  check(client.export_sequence(sequence, buffer, t0_positions, t0_slots, token));
  return token;
}

kvtier_adopted PyClient::adopt_sequence(std::uint64_t token) {
  std::lock_guard lock(mu_);
  kvtier_adopted out{};
  out.struct_size = sizeof(out);
  check(open_client("adopt_sequence").adopt_sequence(token, out));
  return out;
}

kvtier_client_counters PyClient::counters() {
  std::lock_guard lock(mu_);
  kvtier_client_counters out{};
  out.struct_size = sizeof(out);
  check(open_client("counters").counters(out));
  return out;
}

DaemonStatus PyClient::daemon_status() {
  std::lock_guard lock(mu_);
  DaemonStatusPtr status;
  check(open_client("status").daemon_status(status));
  DaemonStatus out;
  out.daemon_version = status->daemon_version;
  out.daemon_epoch = status->daemon_epoch;
  out.uptime_seconds = status->uptime_seconds;
  out.ddr_bytes_total = status->ddr_bytes_total;
  out.ddr_bytes_used = status->ddr_bytes_used;
  out.int8_bytes_total = status->int8_bytes_total;
  out.int8_bytes_used = status->int8_bytes_used;
  out.metrics_address = status->metrics_address;
  for (std::size_t i = 0; i < status->client_count; ++i) {
    const kvtier_client_info& c = status->clients[i];
    ClientInfo info{c.client_id,     c.pid,        c.uid,          c.name,        c.model_name,
                    c.num_layers,    c.num_kv_heads, c.head_dim,   c.dtype,       c.pool_slots,
                    c.pool_slots_used, c.score_records, c.scores_dropped, c.plans_sent, c.plans_acked,
                    c.errors,        {}};
    info.backpressure_tokens = c.backpressure_tokens;
    info.weight = c.weight;
    info.ddr_bytes_used = c.ddr_bytes_used;
    info.ddr_share_bytes = c.ddr_share_bytes;
    info.int8_slots = c.int8_slots;
    info.int8_slots_used = c.int8_slots_used;
    info.t2_demotions = c.t2_demotions;
    info.pressure_demotions = c.pressure_demotions;
    info.pressure_evictions = c.pressure_evictions;
    info.int8_trimmed = c.int8_trimmed;
    info.closing = c.closing != 0;
    // An enum value this build does not know would not convert to kvtier.Backpressure.
    info.last_backpressure =
        c.last_backpressure <= KVTIER_BACKPRESSURE_NODE_BUDGET ? c.last_backpressure : KVTIER_BACKPRESSURE_NONE;
    for (std::size_t j = 0; j < c.sequence_count; ++j) {
      const kvtier_sequence_info& s = c.sequences[j];
      info.sequences.push_back(SequenceInfo{s.sequence_id, s.prompt_length, s.tokens, s.tokens_t0, s.tokens_t1,
                                            s.tokens_t2, s.tokens_t3, s.destroyed_fraction, s.hbm_ratio,
                                            s.evict_ratio, s.mode, s.int8_ratio,
                                            // A state this build does not know would not convert.
                                            s.handoff <= KVTIER_HANDOFF_ADOPTED ? s.handoff : KVTIER_HANDOFF_NONE});
    }
    out.clients.push_back(std::move(info));
  }
  return out;
}

std::string PyClient::last_error() {
  std::lock_guard lock(mu_);
  return client_.last_error();
}

DaemonEvents PyClient::daemon_events(std::uint32_t limit) {
  std::lock_guard lock(mu_);
  DaemonEventsPtr events;
  check(open_client("events").daemon_events(limit, events));
  DaemonEvents out{{}, events->capacity, events->recorded};
  for (std::size_t i = 0; i < events->event_count; ++i) {
    const kvtier_event& e = events->events[i];
    // A kind this build does not know would not convert to kvtier.EventKind.
    const kvtier_event_kind kind = e.kind <= KVTIER_EVENT_SESSION_ERROR ? e.kind : KVTIER_EVENT_SESSION_ERROR;
    out.events.push_back({e.sequence, e.unix_ms, kind, e.client_id, e.client_name, e.sequence_id, e.tokens, e.detail});
  }
  return out;
}

Placement PyClient::placement(std::uint32_t client_id, std::uint32_t sequence_id) {
  constexpr std::uint32_t kRunsPerPage = 65536;  // the most one page may hold
  std::lock_guard lock(mu_);
  Placement out;
  std::uint32_t first = 0;
  do {
    PlacementPtr page;
    check(open_client("placement").sequence_placement(client_id, sequence_id, first, kRunsPerPage, page));
    out.length = page->length;
    for (std::size_t i = 0; i < page->run_count; ++i) out.runs.emplace_back(page->runs[i].tier, page->runs[i].count);
    if (page->next_position <= first) break;  // no progress: never loop
    first = page->next_position;
  } while (first < out.length);
  return out;
}

}  // namespace kvtier::python
