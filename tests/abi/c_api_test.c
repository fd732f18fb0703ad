/* Compiled as C: the C ABI of libkvtier is usable from C. Without arguments it checks what
 * needs no daemon; with a socket path it runs a client session against a live kvtierd. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "kvtier/kvtier.h"

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "c_abi_test: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                            \
    }                                                                      \
  } while (0)

/* The _init functions fill every field appended since 1.0 with its "off" value. */
static int option_defaults(void) {
  kvtier_model_geometry geometry;
  kvtier_sequence_options sequence;
  memset(&geometry, 0xAB, sizeof(geometry));
  kvtier_model_geometry_init(&geometry);
  CHECK(geometry.struct_size == sizeof(geometry));
  CHECK(geometry.pool_tokens == 0);
  CHECK(geometry.int8_pool_tokens == 0); /* no T2 */
  CHECK(geometry.weight == 0);           /* = 1 */
  memset(&sequence, 0xAB, sizeof(sequence));
  kvtier_sequence_options_init(&sequence);
  CHECK(sequence.struct_size == sizeof(sequence));
  CHECK(sequence.use_defaults == 1);
  CHECK(sequence.int8_ratio == 0.0); /* T2 off */
  CHECK(sequence.int8_tokens == 0);
  CHECK(KVTIER_BACKPRESSURE_NONE == 0 && KVTIER_BACKPRESSURE_POOL_FULL == 1 && KVTIER_BACKPRESSURE_NODE_BUDGET == 2);
  CHECK(KVTIER_T2 == 2);
  return 0;
}

/* Hand-off: kvtier_export_buffer_init's defaults, the enums' wire values and the NULL checks that
 * need no daemon. */
static int handoff_offline(void) {
  kvtier_export_buffer buffer;
  kvtier_adopted adopted;
  uint64_t token = 0;
  uint32_t position = 0;
  memset(&buffer, 0xAB, sizeof(buffer));
  kvtier_export_buffer_init(&buffer);
  CHECK(buffer.struct_size == sizeof(buffer));
  CHECK(buffer.kind == KVTIER_BUFFER_HOST_FD);
  CHECK(buffer.fd == -1);
  CHECK(buffer.base == 0 && buffer.bytes == 0 && buffer.buffer_id == 0);
  kvtier_export_buffer_init(NULL); /* ignored */
  CHECK(KVTIER_TPEER == 4);
  CHECK(KVTIER_BUFFER_HOST_FD == 0 && KVTIER_BUFFER_CUDA_IPC == 1 && KVTIER_BUFFER_CUDA_VMM_FD == 2);
  CHECK(KVTIER_HANDOFF_NONE == 0 && KVTIER_HANDOFF_EXPORTED == 1 && KVTIER_HANDOFF_ADOPTING == 2 &&
        KVTIER_HANDOFF_HANDED_OFF == 3 && KVTIER_HANDOFF_ADOPTED == 4);
  memset(&adopted, 0, sizeof(adopted));
  adopted.struct_size = sizeof(adopted);
  CHECK(kvtier_sequence_export(NULL, 1, &buffer, &position, &position, 1, &token) == KVTIER_E_INVALID_ARGUMENT);
  CHECK(kvtier_sequence_adopt(NULL, 1, &adopted) == KVTIER_E_INVALID_ARGUMENT);
  CHECK(kvtier_stage_prefetch(NULL, 1, 0, KVTIER_STAGE_POSITION_ORDER, NULL, 0) == KVTIER_E_INVALID_ARGUMENT);
  CHECK(kvtier_sequence_set_stream(NULL, 1, 0) == KVTIER_E_INVALID_ARGUMENT);
  {
    kvtier_stage_target target;
    memset(&target, 0xAB, sizeof(target));
    kvtier_stage_target_init(&target);
    CHECK(target.struct_size == sizeof(target));
    CHECK(target.k == 0 && target.v == 0 && target.rows == 0 && target.row_offset == 0);
    kvtier_stage_target_init(NULL); /* ignored */
    CHECK(kvtier_stage_layer_at(NULL, 1, 0, &target) == KVTIER_E_INVALID_ARGUMENT);
  }
  {
    kvtier_attention attention;
    memset(&attention, 0xAB, sizeof(attention));
    kvtier_attention_init(&attention);
    CHECK(attention.struct_size == sizeof(attention));
    CHECK(attention.q == NULL && attention.q_heads == 0 && attention.head_dim == 0 && attention.scale == 0.0f);
    CHECK(attention.t0_slots == NULL && attention.t0_count == 0 && attention.probs == NULL && attention.scores == NULL &&
          attention.scores_count == 0);
    kvtier_attention_init(NULL); /* ignored */
    CHECK(kvtier_attend(NULL, 1, 0, &attention) == KVTIER_E_INVALID_ARGUMENT);
  }
  return 0;
}

/* Hand-off argument checks on a live engine session with a registered model and `sequence`
 * open (no attached cache): all refused before anything is sent. */
static int handoff_online(kvtier_client* client, uint32_t sequence) {
  kvtier_export_buffer buffer;
  kvtier_adopted adopted;
  uint64_t token = 0;
  uint32_t position = 0;
  kvtier_export_buffer_init(&buffer);
  buffer.bytes = 4096;
  CHECK(kvtier_sequence_export(client, sequence, NULL, NULL, NULL, 0, &token) == KVTIER_E_INVALID_ARGUMENT);
  CHECK(kvtier_sequence_export(client, sequence, &buffer, NULL, NULL, 0, NULL) == KVTIER_E_INVALID_ARGUMENT);
  CHECK(kvtier_sequence_export(client, sequence, &buffer, NULL, &position, 1, &token) == KVTIER_E_INVALID_ARGUMENT);
  CHECK(strstr(kvtier_client_last_error(client), "t0_positions") != NULL);
  buffer.struct_size = 8; /* too small: refused, never read past */
  CHECK(kvtier_sequence_export(client, sequence, &buffer, NULL, NULL, 0, &token) == KVTIER_E_INVALID_ARGUMENT);
  buffer.struct_size = sizeof(buffer);
  /* No attached cache: there is nothing to hand over. */
  CHECK(kvtier_sequence_export(client, sequence, &buffer, NULL, NULL, 0, &token) == KVTIER_E_BAD_STATE);
  CHECK(strstr(kvtier_client_last_error(client), "attach") != NULL);
  CHECK(kvtier_sequence_adopt(client, 1, NULL) == KVTIER_E_INVALID_ARGUMENT);
  adopted.struct_size = 4; /* smaller than the first release's struct */
  CHECK(kvtier_sequence_adopt(client, 1, &adopted) == KVTIER_E_INVALID_ARGUMENT);
  /* Layer-wise staging needs an attached cache too. */
  {
    kvtier_staged_layer staged;
    char buffer_bytes[64];
    CHECK(kvtier_stage_prefetch(client, sequence, 0, KVTIER_STAGE_POSITION_ORDER, buffer_bytes, sizeof(buffer_bytes)) ==
          KVTIER_E_BAD_STATE);
    CHECK(kvtier_stage_wait(client, sequence, 0, NULL) == KVTIER_E_INVALID_ARGUMENT);
    CHECK(kvtier_stage_wait(client, sequence, 0, &staged) == KVTIER_E_BAD_STATE);
    CHECK(kvtier_sequence_set_stream(client, sequence, 0) == KVTIER_E_BAD_STATE);
  }
  {
    kvtier_stage_target target;
    kvtier_stage_target_init(&target);
    CHECK(kvtier_stage_layer_at(client, sequence, 0, NULL) == KVTIER_E_INVALID_ARGUMENT);
    target.struct_size = 8; /* too small: refused, never read past */
    CHECK(kvtier_stage_layer_at(client, sequence, 0, &target) == KVTIER_E_INVALID_ARGUMENT);
    target.struct_size = sizeof(target);
    CHECK(kvtier_stage_layer_at(client, sequence, 0, &target) == KVTIER_E_BAD_STATE); /* no attached cache */
  }
  {
    kvtier_attention attention;
    kvtier_attention_init(&attention);
    CHECK(kvtier_attend(client, sequence, 0, NULL) == KVTIER_E_INVALID_ARGUMENT);
    attention.struct_size = 8; /* too small: refused, never read past */
    CHECK(kvtier_attend(client, sequence, 0, &attention) == KVTIER_E_INVALID_ARGUMENT);
    attention.struct_size = sizeof(attention);
    attention.t0_count = 2; /* and no slots */
    CHECK(kvtier_attend(client, sequence, 0, &attention) == KVTIER_E_INVALID_ARGUMENT);
    attention.t0_count = 0;
    CHECK(kvtier_attend(client, sequence, 0, &attention) == KVTIER_E_BAD_STATE); /* no attached cache */
    attention.struct_size = offsetof(kvtier_attention, t0_tokens); /* the first version's: accepted */
    CHECK(kvtier_attend(client, sequence, 0, &attention) == KVTIER_E_BAD_STATE);
  }
  return 0;
}

/* The engine helpers take no handle: rows copied between two host views, a bad index refused with
 * nothing copied and the detail in this thread's handle-less last error; block scores of one full block. */
static int engine_helpers(void) {
  float src[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}}; /* 2 heads x 4 rows of one float */
  float dst[2][3] = {{0}};
  const kvtier_head_rows s = {src, 4, sizeof(float), sizeof(src[0])};
  const kvtier_head_rows d = {dst, 3, sizeof(float), sizeof(dst[0])};
  const int64_t from[2] = {3, 1}, to[2] = {0, 2}, bad[2] = {3, 4};
  CHECK(kvtier_copy_rows(&d, &s, 2, sizeof(float), from, to, 2) == KVTIER_OK);
  CHECK(dst[0][0] == 4 && dst[0][2] == 2 && dst[1][0] == 8 && dst[1][2] == 6 && dst[0][1] == 0);
  CHECK(strcmp(kvtier_client_last_error(NULL), "") == 0);
  CHECK(kvtier_copy_rows(&d, &s, 2, sizeof(float), from, bad, 2) == KVTIER_E_INVALID_ARGUMENT);
  CHECK(strlen(kvtier_client_last_error(NULL)) > 0);
  CHECK(dst[0][0] == 4); /* unchanged */
  CHECK(kvtier_copy_rows(NULL, &s, 2, sizeof(float), from, to, 2) == KVTIER_E_INVALID_ARGUMENT);

  /* One row, one query, one head of dim 1, two blocks of 2 keys (the second partial: 3 keys). */
  const float keys[2][1][2][1] = {{{{1}, {1}}}, {{{1}, {0}}}};
  const float query[1] = {1};
  const int32_t table[2] = {0, 1}, lens[1] = {3}, starts[2] = {0, 1};
  float out[2] = {-1, -1};
  const kvtier_paged_keys k = {keys, KVTIER_DTYPE_F32, 2, 1, 2, 1, 2, 2, 1, 1};
  const kvtier_score_batch b = {query, 1, 1, table, 1, 2, lens, starts, 1.0f};
  CHECK(kvtier_block_scores(&k, &b, out, 2) == KVTIER_OK);
  CHECK(out[0] > 0.0f && out[0] < 1.0f && out[1] == 0.0f); /* the partial block gets no score */
  CHECK(kvtier_block_scores(&k, &b, out, 1) == KVTIER_E_INVALID_ARGUMENT); /* out_stride < table width */
  return 0;
}

static int offline(void) {
  kvtier_connect_options options;
  kvtier_client* client = NULL;
  if (option_defaults() != 0) return 1;
  if (handoff_offline() != 0) return 1;
  if (engine_helpers() != 0) return 1;
  CHECK(strcmp(kvtier_status_string(KVTIER_OK), "ok") == 0);
  CHECK(strcmp(kvtier_status_string(KVTIER_E_VERSION_MISMATCH), "version_mismatch") == 0);
  CHECK(strcmp(kvtier_status_string((kvtier_status)999), "unknown") == 0);
  kvtier_connect_options_init(&options);
  CHECK(options.struct_size == sizeof(options));
  options.socket_path = "/tmp/kvtier-c-abi-no-daemon.sock";
  CHECK(kvtier_client_connect(&options, &client) == KVTIER_E_UNAVAILABLE);
  CHECK(client == NULL);
  CHECK(strstr(kvtier_client_last_error(NULL), "cannot connect") != NULL);
  options.struct_size = 1; /* too small: refused, never read past */
  CHECK(kvtier_client_connect(&options, &client) == KVTIER_E_INVALID_ARGUMENT);
  return 0;
}

/* Events and placement (protocol 1.5) through an admin handle: a refused request leaves the
 * handle usable, each result is freed by its own _free. `engine` pushed 100 scores for `sequence`. */
static int admin_online(const char* socket_path, kvtier_client* engine, uint32_t sequence) {
  kvtier_connect_options options;
  kvtier_versions versions;
  uint32_t engine_id;
  kvtier_client* admin = NULL;
  kvtier_daemon_events* events = NULL;
  kvtier_sequence_placement* page = NULL;
  CHECK(kvtier_client_versions(engine, &versions) == KVTIER_OK);
  engine_id = versions.client_id;
  kvtier_connect_options_init(&options);
  options.socket_path = socket_path;
  options.client_name = "c-abi-admin";
  options.role = KVTIER_ROLE_ADMIN;
  CHECK(kvtier_client_connect(&options, &admin) == KVTIER_OK);
  CHECK(kvtier_daemon_events_get(admin, 0, &events) == KVTIER_E_INVALID_ARGUMENT);
  CHECK(events == NULL);
  CHECK(kvtier_daemon_events_get(admin, 16, &events) == KVTIER_OK);
  CHECK(events->capacity == 1024);
  CHECK(events->event_count <= 16);
  kvtier_daemon_events_free(events);
  kvtier_daemon_events_free(NULL);
  /* Once kvtierd consumed the step end, the sequence is 100 positions, all in T0: one run. */
  CHECK(kvtier_client_sync(engine, 10000) == KVTIER_OK);
  CHECK(kvtier_sequence_placement_get(admin, engine_id, sequence, 0, 0, &page) == KVTIER_E_INVALID_ARGUMENT);
  CHECK(kvtier_sequence_placement_get(admin, engine_id, sequence + 1000, 0, 1, &page) == KVTIER_E_NOT_FOUND);
  CHECK(kvtier_sequence_placement_get(admin, engine_id, sequence, 0, 1, &page) == KVTIER_OK);
  CHECK(page->length == 100);
  CHECK(page->run_count == 1);
  CHECK(page->runs[0].tier == KVTIER_T0 && page->runs[0].count == 100);
  CHECK(page->next_position == page->length);
  kvtier_sequence_placement_free(page);
  kvtier_sequence_placement_free(NULL);
  kvtier_client_free(admin);
  return 0;
}

static int online(const char* socket_path) {
  kvtier_connect_options options;
  kvtier_model_geometry geometry;
  kvtier_client* client = NULL;
  kvtier_versions versions;
  kvtier_plan plan;
  kvtier_client_counters counters = {0};
  float scores[100];
  uint32_t sequence = 0;
  int i;
  int due = 0;
  kvtier_connect_options_init(&options);
  options.socket_path = socket_path;
  options.client_name = "c-abi";
  CHECK(kvtier_client_connect(&options, &client) == KVTIER_OK);
  CHECK(kvtier_client_versions(client, &versions) == KVTIER_OK);
  CHECK(versions.daemon_protocol_major == versions.client_protocol_major);
  kvtier_model_geometry_init(&geometry);
  geometry.num_layers = 2;
  geometry.num_kv_heads = 1;
  geometry.head_dim = 0; /* invalid */
  geometry.pool_tokens = 16;
  CHECK(kvtier_model_register(client, &geometry) == KVTIER_E_INVALID_ARGUMENT);
  CHECK(strstr(kvtier_client_last_error(client), "head_dim") != NULL);
  kvtier_client_free(client);

  CHECK(kvtier_client_connect(&options, &client) == KVTIER_OK);
  geometry.head_dim = 64;
  geometry.struct_size = 8; /* smaller than any release's struct: refused, never read past */
  CHECK(kvtier_model_register(client, &geometry) == KVTIER_E_INVALID_ARGUMENT);
  /* A caller built against the 1.0 header (no int8_pool_tokens, weight) is still served. */
  geometry.struct_size = offsetof(kvtier_model_geometry, int8_pool_tokens);
  CHECK(kvtier_model_register(client, &geometry) == KVTIER_OK);
  CHECK(kvtier_sequence_open(client, 10, &sequence) == KVTIER_OK);
  for (i = 0; i < 100; ++i) scores[i] = 0.01f;
  CHECK(kvtier_scores_push(client, sequence, 0, 0, scores, 100) == KVTIER_OK);
  CHECK(kvtier_plan_poll(client, 0, &plan) == KVTIER_E_TIMEOUT);
  CHECK(kvtier_client_counters_get(client, &counters) == KVTIER_OK);
  CHECK(counters.score_records_pushed == 0); /* per decision: summed in the library until step 64 */
  CHECK(kvtier_sequence_completes_interval(client, sequence, &due) == KVTIER_OK && due == 0);
  CHECK(kvtier_score_sums_push(client, sequence, KVTIER_SCORE_SUM_ATTENTION, 0, scores, 100) == KVTIER_E_BAD_STATE);
  {
    /* Shipped per step, the same push goes out at once: 100 scores = 60 + 40. */
    kvtier_sequence_options per_step;
    uint32_t other = 0;
    kvtier_sequence_options_init(&per_step);
    per_step.prompt_length = 10;
    per_step.score_shipping = KVTIER_SHIP_PER_STEP;
    CHECK(kvtier_sequence_open_with(client, &per_step, &other) == KVTIER_OK);
    CHECK(kvtier_scores_push(client, other, 0, 0, scores, 100) == KVTIER_OK);
    CHECK(kvtier_sequence_close(client, other) == KVTIER_OK);
  }
  CHECK(kvtier_client_counters_get(client, &counters) == KVTIER_OK);
  CHECK(counters.score_records_pushed == 2);
  CHECK(counters.backpressure_tokens == 0);  /* nothing was offloaded yet */
  CHECK(counters.backpressure_reason == KVTIER_BACKPRESSURE_NONE);
  {
    /* A caller built against the previous header owns only the first four counters. */
    kvtier_client_counters old_counters;
    memset(&old_counters, 0xAB, sizeof(old_counters));
    old_counters.struct_size = offsetof(kvtier_client_counters, backpressure_tokens);
    CHECK(kvtier_client_counters_get(client, &old_counters) == KVTIER_OK);
    CHECK(old_counters.score_records_pushed == 2);
    CHECK(old_counters.backpressure_tokens == 0xABABABABABABABABull); /* nothing written past it */
  }
  /* The step end carries the client's length: kvtierd's sequence grows to the 100 positions. */
  CHECK(kvtier_sequence_step_end(client, sequence, 0) == KVTIER_OK);
  if (admin_online(socket_path, client, sequence) != 0) return 1;
  if (handoff_online(client, sequence) != 0) return 1;
  CHECK(kvtier_sequence_close(client, sequence) == KVTIER_OK);
  CHECK(kvtier_sequence_close(client, sequence) == KVTIER_E_NOT_FOUND);
  kvtier_client_free(client);
  return 0;
}

int main(int argc, char** argv) {
  if (offline() != 0) return 1;
  if (argc > 1 && online(argv[1]) != 0) return 1;
  printf("c_abi_test: ok\n");
  return 0;
}
