// Header-only C++ layer over the C ABI in kvtier.h: move-only RAII handles, std::span and
// std::string_view at the edges. It adds no state and no exceptions: calls return kvtier_status
// and the handle keeps the detail (last_error()). Thread-safety: as kvtier.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kvtier/kvtier.h"

namespace kvtier {

struct DaemonStatusDeleter {
  void operator()(kvtier_daemon_status* status) const noexcept { kvtier_daemon_status_free(status); }
};
using DaemonStatusPtr = std::unique_ptr<kvtier_daemon_status, DaemonStatusDeleter>;

struct DaemonEventsDeleter {
  void operator()(kvtier_daemon_events* events) const noexcept { kvtier_daemon_events_free(events); }
};
using DaemonEventsPtr = std::unique_ptr<kvtier_daemon_events, DaemonEventsDeleter>;

struct PlacementDeleter {
  void operator()(kvtier_sequence_placement* placement) const noexcept { kvtier_sequence_placement_free(placement); }
};
using PlacementPtr = std::unique_ptr<kvtier_sequence_placement, PlacementDeleter>;

class Client {
 public:
  Client() = default;

  // Connects with `role`; socket_path empty = kvtier_default_socket_path(). On
  // KVTIER_E_VERSION_MISMATCH the handle is kept so versions() names both sides.
  kvtier_status connect(const std::string& socket_path, const std::string& name, kvtier_role role = KVTIER_ROLE_ENGINE) {
    kvtier_connect_options options;
    kvtier_connect_options_init(&options);
    options.socket_path = socket_path.empty() ? nullptr : socket_path.c_str();
    options.client_name = name.empty() ? nullptr : name.c_str();
    options.role = role;
    kvtier_client* raw = nullptr;
    const kvtier_status status = kvtier_client_connect(&options, &raw);
    handle_.reset(raw);
    return status;
  }

  explicit operator bool() const { return handle_ != nullptr; }
  kvtier_client* get() const { return handle_.get(); }
  // Frees the handle (kvtier_client_free); the object is empty afterwards.
  void close() { handle_.reset(); }
  std::string last_error() const { return kvtier_client_last_error(handle_.get()); }

  kvtier_status versions(kvtier_versions& out) const { return kvtier_client_versions(handle_.get(), &out); }

  kvtier_status register_model(std::uint32_t layers, std::uint32_t kv_heads, std::uint32_t head_dim, kvtier_dtype dtype,
                               std::uint32_t pool_tokens, const std::string& model_name = {}) {
    kvtier_model_geometry geometry;
    kvtier_model_geometry_init(&geometry);
    geometry.num_layers = layers;
    geometry.num_kv_heads = kv_heads;
    geometry.head_dim = head_dim;
    geometry.dtype = dtype;
    geometry.pool_tokens = pool_tokens;
    geometry.model_name = model_name.c_str();
    return kvtier_model_register(handle_.get(), &geometry);
  }

  // The full geometry (int8 pool, weight): fill it with kvtier_model_geometry_init first.
  kvtier_status register_model(const kvtier_model_geometry& geometry) {
    return kvtier_model_register(handle_.get(), &geometry);
  }

  kvtier_status open_sequence(std::uint32_t prompt_length, std::uint32_t& sequence) {
    return kvtier_sequence_open(handle_.get(), prompt_length, &sequence);
  }
  kvtier_status open_sequence(const kvtier_sequence_options& options, std::uint32_t& sequence) {
    return kvtier_sequence_open_with(handle_.get(), &options, &sequence);
  }
  kvtier_status close_sequence(std::uint32_t sequence) { return kvtier_sequence_close(handle_.get(), sequence); }
  kvtier_status attach_cache(std::uint32_t sequence, const kvtier_kv_layout& layout) {
    return kvtier_sequence_attach_cache(handle_.get(), sequence, &layout);
  }
  kvtier_status step_end(std::uint32_t sequence, std::uint32_t step) {
    return kvtier_sequence_step_end(handle_.get(), sequence, step);
  }

  kvtier_status push_scores(std::uint32_t sequence, std::uint32_t step, std::uint32_t first_position,
                            std::span<const float> values) {
    return kvtier_scores_push(handle_.get(), sequence, step, first_position, values.data(), values.size());
  }

  kvtier_status push_feature(std::uint32_t sequence, kvtier_feature feature, std::uint32_t first_position,
                             std::span<const float> values) {
    return kvtier_features_push(handle_.get(), sequence, feature, first_position, values.data(), values.size());
  }

  kvtier_status poll_plan(std::chrono::milliseconds timeout, kvtier_plan& plan) {
    return kvtier_plan_poll(handle_.get(), static_cast<int>(timeout.count()), &plan);
  }
  kvtier_status ack_plan(std::uint64_t epoch, bool applied) {
    return kvtier_plan_ack(handle_.get(), epoch, applied ? 1 : 0);
  }
  kvtier_status sync(std::chrono::milliseconds timeout) {
    return kvtier_client_sync(handle_.get(), static_cast<int>(timeout.count()));
  }

  kvtier_status execute_plan(const kvtier_plan& plan, std::span<const std::uint32_t> hbm_slots) {
    return kvtier_plan_execute(handle_.get(), &plan, hbm_slots.data());
  }
  kvtier_status t1_rows(std::uint32_t sequence, std::size_t& rows, std::size_t& bytes) const {
    return kvtier_sequence_t1_rows(handle_.get(), sequence, &rows, &bytes);
  }
  kvtier_status stage_layer(std::uint32_t sequence, std::uint32_t layer, kvtier_staging_order order,
                            std::span<std::byte> buffer, kvtier_staged_layer& out) {
    return kvtier_stage_layer(handle_.get(), sequence, layer, order, buffer.data(), buffer.size(), &out);
  }
  kvtier_status stage_prefetch(std::uint32_t sequence, std::uint32_t layer, kvtier_staging_order order,
                               std::span<std::byte> buffer) {
    return kvtier_stage_prefetch(handle_.get(), sequence, layer, order, buffer.data(), buffer.size());
  }
  kvtier_status stage_wait(std::uint32_t sequence, std::uint32_t layer, kvtier_staged_layer& out) {
    return kvtier_stage_wait(handle_.get(), sequence, layer, &out);
  }
  // CPU backend: the layer's host rows straight to their positions in `target` (kvtier.h).
  kvtier_status stage_layer_at(std::uint32_t sequence, std::uint32_t layer, const kvtier_stage_target& target) {
    return kvtier_stage_layer_at(handle_.get(), sequence, layer, &target);
  }

  // CUDA backend: the stream the sequence's staging waits on (kvtier.h).
  kvtier_status set_stream(std::uint32_t sequence, std::uintptr_t stream) {
    return kvtier_sequence_set_stream(handle_.get(), sequence, stream);
  }
  // CPU backend: a decode query's attention over the T0 slots and the host rows in place (kvtier.h).
  kvtier_status attend(std::uint32_t sequence, std::uint32_t layer, const kvtier_attention& attention) {
    return kvtier_attend(handle_.get(), sequence, layer, &attention);
  }

  // Sequence hand-off (kvtier.h): the token an adopter presents; the adopted sequence.
  // KVTIER_E_INVALID_ARGUMENT, with no detail in last_error(), when the two T0 lists differ in length.
  kvtier_status export_sequence(std::uint32_t sequence, const kvtier_export_buffer& buffer,
                                std::span<const std::uint32_t> t0_positions, std::span<const std::uint32_t> t0_slots,
                                std::uint64_t& token) {
    if (t0_positions.size() != t0_slots.size()) return KVTIER_E_INVALID_ARGUMENT;
    return kvtier_sequence_export(handle_.get(), sequence, &buffer, t0_positions.data(), t0_slots.data(),
                                  t0_positions.size(), &token);
  }
  kvtier_status adopt_sequence(std::uint64_t token, kvtier_adopted& out) {
    return kvtier_sequence_adopt(handle_.get(), token, &out);
  }

  kvtier_status counters(kvtier_client_counters& out) const { return kvtier_client_counters_get(handle_.get(), &out); }

  kvtier_status daemon_status(DaemonStatusPtr& out) {
    kvtier_daemon_status* raw = nullptr;
    const kvtier_status status = kvtier_daemon_status_get(handle_.get(), &raw);
    out.reset(raw);
    return status;
  }

  // The newest `limit` events, oldest first (admin; kvtier.h).
  kvtier_status daemon_events(std::uint32_t limit, DaemonEventsPtr& out) {
    kvtier_daemon_events* raw = nullptr;
    const kvtier_status status = kvtier_daemon_events_get(handle_.get(), limit, &raw);
    out.reset(raw);
    return status;
  }

  // One page of another client's sequence placement (admin; kvtier.h): page from
  // out->next_position until it equals out->length.
  kvtier_status sequence_placement(std::uint32_t client_id, std::uint32_t sequence_id, std::uint32_t first_position,
                                   std::uint32_t max_runs, PlacementPtr& out) {
    kvtier_sequence_placement* raw = nullptr;
    const kvtier_status status =
        kvtier_sequence_placement_get(handle_.get(), client_id, sequence_id, first_position, max_runs, &raw);
    out.reset(raw);
    return status;
  }

 private:
  struct Deleter {
    void operator()(kvtier_client* client) const noexcept { kvtier_client_free(client); }
  };
  std::unique_ptr<kvtier_client, Deleter> handle_;
};

}  // namespace kvtier
