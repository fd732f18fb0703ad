// The C ABI (kvtier.h): noexcept wrappers that turn kvtier::Result into kvtier_status and keep
// the detail in the handle's last error. Nothing throws across this boundary.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <new>
#include <string>

#include "c_api_guard.hpp"
#include "client.hpp"
#include "kvtier/kernels/host_attention.hpp"
#include "kvtier/kvtier.h"
#include "kvtier/protocol/tier_param_table.hpp"

namespace {

using kvtier::client::fail;
using kvtier::client::guarded;
using kvtier::client::to_status;

// Options structs grow at the end. A caller built against an older kvtier.h passes a smaller
// struct_size, at least `known` (the offset of the first field the oldest supported header
// lacks). Each older size in `generations` (ascending; the sizeof of that header's struct) has
// its whole struct read, any other smaller size only `known` bytes (not its tail padding); the
// newer fields keep their _init values (0). A field added into an older struct's tail padding
// would read the caller's padding, so such padding is a reserved field that nothing reads.
template <class T>
bool copy_options(const T* in, std::size_t known, T& out, std::initializer_list<std::size_t> generations = {}) {
  if (in == nullptr || in->struct_size < known) return false;
  std::memset(&out, 0, sizeof(out));
  std::size_t size = known;
  if (in->struct_size >= sizeof(T)) size = sizeof(T);
  for (const std::size_t g : generations) {
    if (in->struct_size >= g && g > size) size = g;
  }
  std::memcpy(&out, in, size);
  out.struct_size = sizeof(T);
  return true;
}

// sizeof(kvtier_sequence_options) of protocol 1.1 to 1.5 headers: up to int8_tokens, padded.
constexpr std::size_t kSequenceOptions15 =
    (offsetof(kvtier_sequence_options, int8_tokens) + sizeof(uint32_t) + alignof(kvtier_sequence_options) - 1) /
    alignof(kvtier_sequence_options) * alignof(kvtier_sequence_options);
static_assert(offsetof(kvtier_sequence_options, score_shipping) >= kSequenceOptions15,
              "a field added since 1.5 must not sit in the 1.5 struct's tail padding");
// ... of 1.6 headers: up to score_shipping, padded.
constexpr std::size_t kSequenceOptions16 =
    (offsetof(kvtier_sequence_options, score_shipping) + sizeof(uint32_t) + alignof(kvtier_sequence_options) - 1) /
    alignof(kvtier_sequence_options) * alignof(kvtier_sequence_options);
static_assert(offsetof(kvtier_sequence_options, tokens_per_position) >= kSequenceOptions16,
              "a field added since 1.6 must not sit in the 1.6 struct's tail padding");

}  // namespace

extern "C" {

const char* kvtier_status_string(kvtier_status status) {
  if (status == KVTIER_E_TIMEOUT) return "timeout";
  if (status < KVTIER_OK || status > KVTIER_E_INTERNAL) return "unknown";
  return kvtier::errc_name(static_cast<kvtier::Errc>(status)).data();
}

void kvtier_connect_options_init(kvtier_connect_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->role = KVTIER_ROLE_ENGINE;
}

const char* kvtier_default_socket_path(void) {
  const char* env = std::getenv("KVTIER_SOCKET");
  return env != nullptr && env[0] != '\0' ? env : "/run/kvtier/kvtierd.sock";
}

kvtier_status kvtier_client_connect(const kvtier_connect_options* options, kvtier_client** out) {
  if (options == nullptr || out == nullptr || options->struct_size < sizeof(kvtier_connect_options)) {
    return KVTIER_E_INVALID_ARGUMENT;
  }
  *out = nullptr;
  try {
    kvtier::client::thread_error().clear();
    kvtier::client::ClientOptions opts;
    opts.socket_path = options->socket_path != nullptr ? options->socket_path : kvtier_default_socket_path();
    opts.name = options->client_name != nullptr ? options->client_name : "pid-" + std::to_string(::getpid());
    opts.role = options->role;
    auto handle = std::make_unique<kvtier_client>();
    auto connected = kvtier::client::Client::connect(opts, handle->impl);
    if (!connected) {
      const kvtier_status status = fail(handle.get(), connected.error());
      kvtier::client::thread_error() = connected.error().message;
      // Keep the handle on a version mismatch so the caller can read both sides' versions.
      if (status == KVTIER_E_VERSION_MISMATCH && handle->impl) *out = handle.release();
      return status;
    }
    *out = handle.release();
    return KVTIER_OK;
  } catch (...) {
    kvtier::client::thread_error() = "unexpected exception";
    return KVTIER_E_INTERNAL;
  }
}

void kvtier_client_free(kvtier_client* client) { delete client; }

const char* kvtier_client_last_error(const kvtier_client* client) {
  return client != nullptr ? client->last_error.c_str() : kvtier::client::thread_error().c_str();
}

kvtier_status kvtier_client_versions(const kvtier_client* client, kvtier_versions* out) {
  if (client == nullptr || !client->impl || out == nullptr) return KVTIER_E_INVALID_ARGUMENT;
  *out = client->impl->versions();
  return KVTIER_OK;
}

void kvtier_model_geometry_init(kvtier_model_geometry* geometry) {
  if (geometry == nullptr) return;
  std::memset(geometry, 0, sizeof(*geometry));
  geometry->struct_size = sizeof(*geometry);
  geometry->dtype = KVTIER_DTYPE_BF16;
}

kvtier_status kvtier_model_register(kvtier_client* client, const kvtier_model_geometry* geometry) {
  return guarded(client, [&](kvtier::client::Client& c) {
    kvtier_model_geometry g;
    if (!copy_options(geometry, offsetof(kvtier_model_geometry, int8_pool_tokens), g)) {
      return fail(client, {kvtier::Errc::kInvalidArgument, "geometry is NULL or its struct_size is too small"});
    }
    auto ok = c.register_model(g);
    return ok ? KVTIER_OK : fail(client, ok.error());
  });
}

void kvtier_sequence_options_init(kvtier_sequence_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->use_defaults = 1;
#define KVTIER_C_DEFAULT(name, Wire, Type, value, range, help) options->name = value;
  KVTIER_TIER_NUMBERS(KVTIER_C_DEFAULT)
#undef KVTIER_C_DEFAULT
  options->mode = KVTIER_EVICT_CUMULATIVE;
  options->policy = KVTIER_POLICY_PAPER;
  options->protect_prompt = -1;
}

kvtier_status kvtier_sequence_open(kvtier_client* client, uint32_t prompt_length, uint32_t* out_sequence) {
  kvtier_sequence_options options;
  kvtier_sequence_options_init(&options);
  options.prompt_length = prompt_length;
  return kvtier_sequence_open_with(client, &options, out_sequence);
}

kvtier_status kvtier_sequence_open_with(kvtier_client* client, const kvtier_sequence_options* options,
                                        uint32_t* out_sequence) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (out_sequence == nullptr) return fail(client, {kvtier::Errc::kInvalidArgument, "out_sequence is NULL"});
    kvtier_sequence_options o;
    if (!copy_options(options, offsetof(kvtier_sequence_options, int8_ratio), o,
                      {kSequenceOptions15, kSequenceOptions16})) {
      return fail(client, {kvtier::Errc::kInvalidArgument, "options is NULL or its struct_size is too small"});
    }
    auto id = c.open_sequence(o);
    if (!id) return fail(client, id.error());
    *out_sequence = *id;
    return KVTIER_OK;
  });
}

kvtier_status kvtier_sequence_close(kvtier_client* client, uint32_t sequence) {
  return guarded(client, [&](kvtier::client::Client& c) {
    auto ok = c.close_sequence(sequence);
    return ok ? KVTIER_OK : fail(client, ok.error());
  });
}

kvtier_status kvtier_scores_push(kvtier_client* client, uint32_t sequence, uint32_t step, uint32_t first_position,
                                 const float* values, size_t count) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (values == nullptr && count != 0) return fail(client, {kvtier::Errc::kInvalidArgument, "values is NULL"});
    auto ok = c.push_scores(sequence, step, first_position, std::span(values, count));
    return ok ? KVTIER_OK : fail(client, ok.error());
  });
}

kvtier_status kvtier_features_push(kvtier_client* client, uint32_t sequence, kvtier_feature feature,
                                   uint32_t first_position, const float* values, size_t count) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (values == nullptr && count != 0) return fail(client, {kvtier::Errc::kInvalidArgument, "values is NULL"});
    auto ok = c.push_feature(sequence, feature, first_position, std::span(values, count));
    return ok ? KVTIER_OK : fail(client, ok.error());
  });
}

kvtier_status kvtier_score_sums_push(kvtier_client* client, uint32_t sequence, kvtier_score_sum kind,
                                    uint32_t first_position, const float* values, size_t count) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (values == nullptr && count != 0) return fail(client, {kvtier::Errc::kInvalidArgument, "values is NULL"});
    auto ok = c.push_score_sums(sequence, kind, first_position, std::span(values, count));
    return ok ? KVTIER_OK : fail(client, ok.error());
  });
}

kvtier_status kvtier_sequence_completes_interval(kvtier_client* client, uint32_t sequence, int* out) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (out == nullptr) return fail(client, {kvtier::Errc::kInvalidArgument, "out is NULL"});
    auto due = c.completes_interval(sequence);
    if (!due) return fail(client, due.error());
    *out = *due ? 1 : 0;
    return KVTIER_OK;
  });
}

kvtier_status kvtier_client_counters_get(const kvtier_client* client, kvtier_client_counters* out) {
  if (client == nullptr || !client->impl || out == nullptr) return KVTIER_E_INVALID_ARGUMENT;
  const kvtier_client_counters counters = client->impl->counters();
  // Grown structs: a caller built against an older header owns only struct_size bytes.
  const std::size_t size = out->struct_size == 0 ? sizeof(counters) : std::min(out->struct_size, sizeof(counters));
  if (size < offsetof(kvtier_client_counters, backpressure_tokens)) return KVTIER_E_INVALID_ARGUMENT;
  std::memcpy(out, &counters, size);
  out->struct_size = size;
  return KVTIER_OK;
}

kvtier_status kvtier_plan_poll(kvtier_client* client, int timeout_ms, kvtier_plan* out) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (out == nullptr) return fail(client, {kvtier::Errc::kInvalidArgument, "out is NULL"});
    const auto timeout = timeout_ms < 0 ? std::chrono::milliseconds(std::chrono::hours(24 * 365))
                                        : std::chrono::milliseconds(timeout_ms);
    auto plan = c.poll_plan(timeout);
    if (!plan) return fail(client, plan.error());
    if (!*plan) return KVTIER_E_TIMEOUT;
    *out = **plan;
    return KVTIER_OK;
  });
}

kvtier_status kvtier_plan_ack(kvtier_client* client, uint64_t epoch, int applied) {
  return guarded(client, [&](kvtier::client::Client& c) {
    auto ok = c.ack_plan(epoch, applied != 0);
    return ok ? KVTIER_OK : fail(client, ok.error());
  });
}

kvtier_status kvtier_client_sync(kvtier_client* client, int timeout_ms) {
  return guarded(client, [&](kvtier::client::Client& c) {
    const auto timeout = timeout_ms < 0 ? std::chrono::milliseconds(std::chrono::hours(24 * 365))
                                        : std::chrono::milliseconds(timeout_ms);
    auto idle = c.sync(timeout);
    if (!idle) return fail(client, idle.error());
    return *idle ? KVTIER_OK : KVTIER_E_TIMEOUT;
  });
}

void kvtier_kv_layout_init(kvtier_kv_layout* layout) {
  if (layout == nullptr) return;
  std::memset(layout, 0, sizeof(*layout));
  layout->struct_size = sizeof(*layout);
  layout->dtype = KVTIER_DTYPE_BF16;
  layout->block_size = 1;
  layout->backend = KVTIER_BACKEND_CPU;
}

kvtier_status kvtier_sequence_attach_cache(kvtier_client* client, uint32_t sequence, const kvtier_kv_layout* layout) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (layout == nullptr || layout->struct_size < sizeof(kvtier_kv_layout)) {
      return fail(client, {kvtier::Errc::kInvalidArgument, "layout is NULL or its struct_size is too small"});
    }
    auto ok = c.attach_cache(sequence, *layout);
    return ok ? KVTIER_OK : fail(client, ok.error());
  });
}

kvtier_status kvtier_sequence_step_end(kvtier_client* client, uint32_t sequence, uint32_t step) {
  return guarded(client, [&](kvtier::client::Client& c) {
    auto ok = c.step_end(sequence, step);
    return ok ? KVTIER_OK : fail(client, ok.error());
  });
}

kvtier_status kvtier_plan_execute(kvtier_client* client, const kvtier_plan* plan, const uint32_t* hbm_slots) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (plan == nullptr || (hbm_slots == nullptr && plan->move_count != 0)) {
      return fail(client, {kvtier::Errc::kInvalidArgument, "plan or hbm_slots is NULL"});
    }
    auto ok = c.execute_plan(*plan, std::span(hbm_slots, plan->move_count));
    return ok ? KVTIER_OK : fail(client, ok.error());
  });
}

kvtier_status kvtier_sequence_t1_rows(const kvtier_client* client, uint32_t sequence, size_t* out_rows,
                                      size_t* out_bytes) {
  if (client == nullptr || !client->impl || out_rows == nullptr || out_bytes == nullptr) {
    return KVTIER_E_INVALID_ARGUMENT;
  }
  auto cache = client->impl->cache(sequence);
  if (!cache) return to_status(cache.error().code);
  *out_rows = (*cache)->staged_rows();
  *out_bytes = (*cache)->stage_bytes();
  return KVTIER_OK;
}

kvtier_status kvtier_stage_layer(kvtier_client* client, uint32_t sequence, uint32_t layer, kvtier_staging_order order,
                                 void* buffer, size_t capacity, kvtier_staged_layer* out) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (out == nullptr) return fail(client, {kvtier::Errc::kInvalidArgument, "out is NULL"});
    auto cache = c.cache(sequence);
    if (!cache) return fail(client, cache.error());
    auto staged = (*cache)->stage(layer, order, buffer, capacity);
    if (!staged) return fail(client, staged.error());
    *out = *staged;
    return KVTIER_OK;
  });
}

void kvtier_stage_target_init(kvtier_stage_target* target) {
  if (target == nullptr) return;
  std::memset(target, 0, sizeof(*target));
  target->struct_size = sizeof(*target);
}

kvtier_status kvtier_stage_layer_at(kvtier_client* client, uint32_t sequence, uint32_t layer,
                                    const kvtier_stage_target* target) {
  return guarded(client, [&](kvtier::client::Client& c) {
    kvtier_stage_target t;
    if (!copy_options(target, sizeof(kvtier_stage_target), t)) {
      return fail(client, {kvtier::Errc::kInvalidArgument, "target is NULL or its struct_size is too small"});
    }
    auto cache = c.cache(sequence);
    if (!cache) return fail(client, cache.error());
    const kvtier::kernels::PositionTarget where{t.k, t.v, t.rows, t.token_stride, t.head_stride, t.row_offset};
    if (auto ok = (*cache)->stage_at(layer, where); !ok) return fail(client, ok.error());
    return KVTIER_OK;
  });
}

void kvtier_attention_init(kvtier_attention* attention) {
  if (attention == nullptr) return;
  std::memset(attention, 0, sizeof(*attention));
  attention->struct_size = sizeof(*attention);
}

kvtier_status kvtier_attend(kvtier_client* client, uint32_t sequence, uint32_t layer,
                            const kvtier_attention* attention) {
  return guarded(client, [&](kvtier::client::Client& c) {
    kvtier_attention a;
    // The first kvtier_attention ended before t0_tokens (0 then: every token of the T0 slots).
    if (!copy_options(attention, offsetof(kvtier_attention, t0_tokens), a)) {
      return fail(client, {kvtier::Errc::kInvalidArgument, "attention is NULL or its struct_size is too small"});
    }
    if (a.t0_count > 0 && a.t0_slots == nullptr) {
      return fail(client, {kvtier::Errc::kInvalidArgument, "t0_slots is NULL with a t0_count"});
    }
    auto cache = c.cache(sequence);
    if (!cache) return fail(client, cache.error());
    const kvtier::kernels::HostQuery query{a.q, a.q_heads, a.head_dim, a.scale, a.keys_dim_major != 0};
    const kvtier::kernels::AttendOutput out{a.out, a.lse, a.probs, a.probs_stride, a.scores, a.scores_count};
    const std::size_t t0_tokens =
        a.t0_tokens != 0 ? a.t0_tokens : a.t0_count * kvtier::kernels::tokens_per_row((*cache)->layout(), query);
    if (auto ok = (*cache)->attend(layer, {a.t0_slots, a.t0_count}, t0_tokens, query, out); !ok) {
      return fail(client, ok.error());
    }
    return KVTIER_OK;
  });
}

kvtier_status kvtier_stage_prefetch(kvtier_client* client, uint32_t sequence, uint32_t layer,
                                    kvtier_staging_order order, void* buffer, size_t capacity) {
  return guarded(client, [&](kvtier::client::Client& c) {
    auto cache = c.cache(sequence);
    if (!cache) return fail(client, cache.error());
    if (auto ok = (*cache)->prefetch(layer, order, buffer, capacity); !ok) return fail(client, ok.error());
    return KVTIER_OK;
  });
}

kvtier_status kvtier_stage_wait(kvtier_client* client, uint32_t sequence, uint32_t layer, kvtier_staged_layer* out) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (out == nullptr) return fail(client, {kvtier::Errc::kInvalidArgument, "out is NULL"});
    auto cache = c.cache(sequence);
    if (!cache) return fail(client, cache.error());
    auto staged = (*cache)->wait(layer);
    if (!staged) return fail(client, staged.error());
    *out = *staged;
    return KVTIER_OK;
  });
}

kvtier_status kvtier_sequence_set_stream(kvtier_client* client, uint32_t sequence, uintptr_t stream) {
  return guarded(client, [&](kvtier::client::Client& c) {
    auto cache = c.cache(sequence);
    if (!cache) return fail(client, cache.error());
    (*cache)->set_compute_stream(stream);
    return KVTIER_OK;
  });
}

void kvtier_export_buffer_init(kvtier_export_buffer* buffer) {
  if (buffer == nullptr) return;
  std::memset(buffer, 0, sizeof(*buffer));
  buffer->struct_size = sizeof(*buffer);
  buffer->kind = KVTIER_BUFFER_HOST_FD;
  buffer->fd = -1;
}

kvtier_status kvtier_sequence_export(kvtier_client* client, uint32_t sequence, const kvtier_export_buffer* buffer,
                                     const uint32_t* t0_positions, const uint32_t* t0_slots, size_t t0_count,
                                     uint64_t* out_token) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (out_token == nullptr) return fail(client, {kvtier::Errc::kInvalidArgument, "out_token is NULL"});
    if (buffer == nullptr || buffer->struct_size < sizeof(kvtier_export_buffer)) {
      return fail(client, {kvtier::Errc::kInvalidArgument, "buffer is NULL or its struct_size is too small"});
    }
    if ((t0_positions == nullptr || t0_slots == nullptr) && t0_count != 0) {
      return fail(client, {kvtier::Errc::kInvalidArgument, "t0_positions or t0_slots is NULL"});
    }
    auto token = c.export_sequence(sequence, *buffer, std::span(t0_positions, t0_count), std::span(t0_slots, t0_count));
    if (!token) return fail(client, token.error());
    *out_token = *token;
    return KVTIER_OK;
  });
}

kvtier_status kvtier_sequence_adopt(kvtier_client* client, uint64_t token, kvtier_adopted* out) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (out == nullptr) return fail(client, {kvtier::Errc::kInvalidArgument, "out is NULL"});
    // Grown structs: a caller built against an older header owns only struct_size bytes (every
    // field of the first version is required).
    const std::size_t size = out->struct_size == 0 ? sizeof(kvtier_adopted) : std::min(out->struct_size, sizeof(kvtier_adopted));
    if (size < offsetof(kvtier_adopted, exporter_pid) + sizeof(out->exporter_pid)) {
      return fail(client, {kvtier::Errc::kInvalidArgument, "out->struct_size is too small"});
    }
    auto adopted = c.adopt_sequence(token);
    if (!adopted) return fail(client, adopted.error());
    std::memcpy(out, &*adopted, size);
    out->struct_size = size;
    return KVTIER_OK;
  });
}

}  // extern "C"
