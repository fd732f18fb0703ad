/* libkvtier, part 2 of 3 (kvtier.h includes all three): what an inference engine uses. It
 * registers its model, opens a sequence per request, streams scores, executes the plans over its
 * KV cache (or has libkvtier execute them), stages T1 rows back, hands sequences to other
 * processes; and the engine helpers that need no client (row copies, paged block scores). */
#ifndef KVTIER_CACHE_H
#define KVTIER_CACHE_H

#include "kvtier/client.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvtier_model_geometry {
  size_t struct_size;
  uint32_t num_layers;
  uint32_t num_kv_heads;
  uint32_t head_dim;
  kvtier_dtype dtype;
  const char* model_name; /* may be NULL; the client_name rule applies */
  uint32_t pool_tokens;   /* DDR pool capacity requested, in tokens */
  uint32_t int8_pool_tokens; /* int8 (T2) pool capacity requested, in tokens; 0 = no T2 */
  uint32_t weight;           /* share of the node DDR budget under pressure; 0 = 1 */
} kvtier_model_geometry;

KVTIER_API void kvtier_model_geometry_init(kvtier_model_geometry* geometry);

/* Engine role only. Refused with KVTIER_E_INVALID_ARGUMENT for zero or absurd sizes. */
KVTIER_API kvtier_status kvtier_model_register(kvtier_client* client, const kvtier_model_geometry* geometry);

KVTIER_API kvtier_status kvtier_sequence_open(kvtier_client* client, uint32_t prompt_length, uint32_t* out_sequence);

/* Per-sequence tier engine parameters; use_defaults = 1 (the _init value) takes the daemon's
 * configuration and ignores the other fields. */
typedef struct kvtier_sequence_options {
  size_t struct_size;
  uint32_t prompt_length;
  int use_defaults;
  uint32_t sink_tokens, window_tokens, interval;
  double hbm_ratio, evict_ratio, hysteresis, decay;
  uint32_t hbm_tokens, evict_tokens; /* absolute budgets; 0 = use the ratio */
  kvtier_eviction_mode mode;
  kvtier_policy policy;
  uint64_t seed;                 /* random, vase */
  int protect_prompt;            /* -1: the policy's default, 0: no, 1: yes */
  uint32_t recent_window;        /* vase, r_kv; 0 = the policy's default */
  double value_protect_ratio;    /* vase */
  uint32_t value_protect_tokens; /* vase; 0 = use the ratio */
  double rkv_lambda;             /* r_kv */
  uint32_t key_digest_dim;       /* r_kv: floats per key digest sent; 0 = 16 */
  /* T2 budget: of the survivors not kept in T0, the lowest-ranked share (int8_ratio, or
   * int8_tokens tokens when nonzero) goes to the int8 pool instead of T1 (lossy). 0/0 = off.
   * Needs a model registered with int8_pool_tokens > 0. */
  double int8_ratio;
  uint32_t int8_tokens;
  uint32_t reserved0; /* ignored: the tail padding of the 1.5 struct, which callers may not zero */
  /* How the library ships this sequence's scores (kvtier_score_shipping; a caller built against
   * an older header gets KVTIER_SHIP_PER_DECISION). Not a tier parameter: use_defaults keeps it. */
  uint32_t score_shipping;
  uint32_t reserved1; /* ignored: the tail padding of the 1.6 struct, which callers may not zero */
  /* Tokens one position of the sequence stands for: 1 (0 means 1) when the engine tiers single
   * tokens, its block size when it tiers whole blocks (vLLM). sink_tokens, window_tokens,
   * hbm_tokens, value_protect_tokens (rounded up), evict_tokens and int8_tokens (rounded down; a
   * nonzero one below one position is refused) and the daemon's defaults are in tokens and are
   * converted with it; prompt_length is in positions. Not a tier parameter: use_defaults keeps it. */
  uint32_t tokens_per_position;
} kvtier_sequence_options;

/* KVTIER_SHIP_PER_DECISION (default): kvtier_scores_push accumulates in the library and only each
 * interval's sums cross shared memory, once per Δ steps; KVTIER_SHIP_PER_STEP: every push goes out
 * as it comes and kvtierd accumulates (the pre-1.6 traffic, kept as a baseline). kvtierd's scores
 * and plans are bit-identical either way (PROTOCOL.md §4 "Score shipping"). */
typedef enum kvtier_score_shipping { KVTIER_SHIP_PER_DECISION = 0, KVTIER_SHIP_PER_STEP = 1 } kvtier_score_shipping;

/* Fills the paper's defaults (k_s 4, k_w 128, Δ 64, β 0.5, r 0, decay 1) with use_defaults = 1. */
KVTIER_API void kvtier_sequence_options_init(kvtier_sequence_options* options);
/* Refused with KVTIER_E_INVALID_ARGUMENT naming the field when a parameter is out of range. */
KVTIER_API kvtier_status kvtier_sequence_open_with(kvtier_client* client, const kvtier_sequence_options* options,
                                                   uint32_t* out_sequence);
KVTIER_API kvtier_status kvtier_sequence_close(kvtier_client* client, uint32_t sequence);

/* Publishes one decode step's scores for positions [first_position, first_position + count).
 * Several pushes for one position in one step add up. Per decision (the default) the values are
 * summed in the library and shipped by the kvtier_sequence_step_end that completes an interval;
 * per step they go out now. Never blocks: when the ring is full the records are dropped and
 * counted (per decision: deferred to the next interval, see kvtier_client_counters). Returns
 * KVTIER_OK in every case. */
KVTIER_API kvtier_status kvtier_scores_push(kvtier_client* client, uint32_t sequence, uint32_t step,
                                            uint32_t first_position, const float* values, size_t count);

/* For engines that accumulate scores on the device (kernels/cuda ScoreAccumulator folds each
 * step into the interval's sums exactly as the library would): the interval's sums for positions
 * [first_position, first_position + count), pushed in the step that completes an interval
 * (kvtier_sequence_completes_interval) before its kvtier_sequence_step_end, which ships them.
 * KVTIER_SCORE_SUM_RECENT only for policies that keep recent attention (vase, r_kv). They add to
 * whatever kvtier_scores_push accumulated. KVTIER_E_BAD_STATE for a sequence shipped per step
 * or outside such a step; KVTIER_E_NOT_FOUND for an unknown sequence. */
typedef enum kvtier_score_sum { KVTIER_SCORE_SUM_ATTENTION = 0, KVTIER_SCORE_SUM_RECENT = 1 } kvtier_score_sum;
KVTIER_API kvtier_status kvtier_score_sums_push(kvtier_client* client, uint32_t sequence, kvtier_score_sum kind,
                                                uint32_t first_position, const float* values, size_t count);
/* *out = 1 when the next kvtier_sequence_step_end of `sequence` completes an interval (the daemon
 * then decides), else 0. */
KVTIER_API kvtier_status kvtier_sequence_completes_interval(kvtier_client* client, uint32_t sequence, int* out);

/* Per-token features some policies need, sent only when the sequence's policy uses them:
 * KVTIER_FEATURE_VALUE_RANGE (vase): one value per position, max − min of the token's value
 * vector; KVTIER_FEATURE_KEY_DIGEST (r_kv): key_digest_dim floats per position (e.g. the
 * head-mean key of one middle layer). Never blocks; full rings drop and count as scores do. */
typedef enum kvtier_feature { KVTIER_FEATURE_VALUE_RANGE = 2, KVTIER_FEATURE_KEY_DIGEST = 3 } kvtier_feature;
KVTIER_API kvtier_status kvtier_features_push(kvtier_client* client, uint32_t sequence, kvtier_feature feature,
                                              uint32_t first_position, const float* values, size_t count);

typedef struct kvtier_client_counters {
  size_t struct_size;
  uint64_t score_records_pushed;
  uint64_t score_records_dropped;
  uint64_t plan_records_received;
  uint64_t plans_acked;
  uint64_t backpressure_tokens; /* tokens the daemon kept in T0 for lack of a host row, so far */
  uint32_t backpressure_reason; /* kvtier_backpressure of the latest such notice */
  /* Daemon restarts (PROTOCOL.md §4 "Reattachment"): times the daemon's end of the connection
   * was found gone, and successful reattachments to a successor. Between the two the engine
   * decodes on its last placement: no plans, scores and step ends dropped (and counted above). */
  uint64_t daemon_losses;
  uint64_t reattachments;
  uint32_t detached;        /* 1 while no daemon is attached */
  uint32_t reattach_refused; /* 1 once a successor refused the reattachment (no more attempts) */
  /* Positions whose interval sums did not fit into the score ring and went out with a later
   * interval's (their scores arrive late, never lost). */
  uint64_t score_positions_deferred;
} kvtier_client_counters;

/* out->struct_size: 0 (or this header's size) fills the whole struct; a smaller size (a caller
 * built against an older header) fills only that many bytes. struct_size is set on return. */
KVTIER_API kvtier_status kvtier_client_counters_get(const kvtier_client* client, kvtier_client_counters* out);

/* ---- plans ---------------------------------------------------------------------------- */

#define KVTIER_NO_SLOT UINT32_MAX

/* One token changing tier. Slots index pool rows (the same row position in every layer);
 * KVTIER_NO_SLOT where a side has no pool row (T0, T3). */
typedef struct kvtier_plan_move {
  uint32_t position; /* absolute token position; never changes with the tier */
  uint8_t from_tier, to_tier;
  uint16_t reserved;
  uint32_t src_slot, dst_slot;
} kvtier_plan_move;

/* A differential plan for one sequence. Several plans may be unacknowledged at once, each of
 * another sequence (kvtierd's limits.plans_in_flight; a sequence's plans come one at a time, in
 * order). moves stay valid until the plan is acknowledged and kvtier_plan_poll is called again,
 * or until its sequence is closed. */
typedef struct kvtier_plan {
  uint64_t epoch;
  uint32_t sequence;
  size_t move_count;
  const kvtier_plan_move* moves;
} kvtier_plan;

/* Waits up to timeout_ms (0: poll, <0: forever) for the next complete plan. KVTIER_E_TIMEOUT
 * when none arrived. */
KVTIER_API kvtier_status kvtier_plan_poll(kvtier_client* client, int timeout_ms, kvtier_plan* out);

/* Acknowledges a polled plan: applied != 0 after every move was executed (the daemon then frees
 * the source slots); applied == 0 when it could not be applied (the daemon rolls back that plan
 * and its sequence's placement stays as before). Each polled plan is acknowledged once, plans of
 * different sequences in any order; KVTIER_E_INVALID_ARGUMENT for an epoch not polled or already
 * acknowledged. A plan whose sequence was closed was rolled back at the close: its ack is
 * accepted and goes nowhere. */
KVTIER_API kvtier_status kvtier_plan_ack(kvtier_client* client, uint64_t epoch, int applied);

/* Waits up to timeout_ms (0: look once, <0: forever) until kvtierd has consumed every score
 * record and step end and resolved every acknowledgement this client published before the call,
 * and has gone idle on this client's rings. Every plan it decided from them is then on the plan
 * ring, so a kvtier_plan_poll(0) right after returns it: an engine that syncs after each step end
 * and each acknowledgement sees plans at the same steps on every run, whatever the load (plans
 * that another client's pressure causes still arrive when they arrive). KVTIER_E_TIMEOUT when
 * the daemon did not get there in time (busy, or the session ended). Polls the rings' sleep flags
 * with a backoff of up to 1 ms; meant for tests and for engines that want determinism over
 * latency. */
KVTIER_API kvtier_status kvtier_client_sync(kvtier_client* client, int timeout_ms);

/* ---- executing plans over the engine's KV cache ----------------------------------------- */

typedef enum kvtier_backend { KVTIER_BACKEND_CPU = 0, KVTIER_BACKEND_CUDA = 1 } kvtier_backend;
typedef enum kvtier_staging_order {
  KVTIER_STAGE_POSITION_ORDER = 0, /* rows by ascending absolute position: bit-exact merges */
  KVTIER_STAGE_COMPACT = 1         /* rows in pool order: exact within fp reordering */
} kvtier_staging_order;

/* Where a sequence's KV lives in the engine (T0). Slot s of layer l, KV head h starts at
 *   k_base[l] + (s / block_size) * block_stride + (s % block_size) * token_stride + h * head_stride
 * (V likewise), so HF-style [heads, seq, dim] (block_size = num_slots) and vLLM-style paged
 * [blocks, block_size, heads, dim] caches are both described. */
typedef struct kvtier_kv_layout {
  size_t struct_size;
  uint32_t num_layers, num_kv_heads, head_dim;
  kvtier_dtype dtype;
  uint32_t num_slots;
  uint32_t block_size;
  size_t token_stride, head_stride, block_stride; /* bytes */
  const uintptr_t* k_base;                        /* num_layers pointers; copied */
  const uintptr_t* v_base;
  kvtier_backend backend;
} kvtier_kv_layout;

KVTIER_API void kvtier_kv_layout_init(kvtier_kv_layout* layout);

/* Binds a sequence to the engine's cache; needed before kvtier_plan_execute/kvtier_stage_layer.
 * Attaching an attached sequence again moves it: an engine that grew or moved its cache (having
 * copied every T0 row to the same slot of the new one) keeps the sequence's T1/T2 rows. The new
 * layout keeps layers, KV heads, head_dim, dtype and backend (else KVTIER_E_INVALID_ARGUMENT);
 * KVTIER_E_BAD_STATE while a layer is being prefetched or a hand-off is pending. */
KVTIER_API kvtier_status kvtier_sequence_attach_cache(kvtier_client* client, uint32_t sequence,
                                                      const kvtier_kv_layout* layout);

/* Marks the end of decode step `step` (steps increase) after its scores were pushed; the
 * daemon decides tiers every Δ ended steps. The step end that completes an interval ships the
 * interval's score sums first (per-decision shipping). */
KVTIER_API kvtier_status kvtier_sequence_step_end(kvtier_client* client, uint32_t sequence, uint32_t step);

/* Executes a polled plan's copies. hbm_slots[i] is the engine's cache slot of moves[i] where it
 * touches T0: the slot the token occupies for moves out of T0 (offload, read before the engine
 * frees it) and the slot the engine reserved for moves into T0 (restore). Other entries are
 * ignored. On success the library reads the sequence's T1 rows from their new pool slots; then
 * acknowledge with kvtier_plan_ack(applied = 1). On failure nothing changed: ack with 0.
 * T1 -> T2 moves only switch reads to the int8 slot (the daemon has quantized the row already);
 * T2 -> T0 dequantizes every layer's row into the engine slot; T2 -> T3 drops it. */
KVTIER_API kvtier_status kvtier_plan_execute(kvtier_client* client, const kvtier_plan* plan, const uint32_t* hbm_slots);

/* One layer's staged host rows: K [rows, kv_heads, head_dim] then V, both in `buffer`. T1 rows
 * are copied exactly, T2 rows dequantized to the model dtype; one list either way (by ascending
 * position with KVTIER_STAGE_POSITION_ORDER, T1 rows then T2 rows with KVTIER_STAGE_COMPACT). */
typedef struct kvtier_staged_layer {
  uint32_t layer;
  size_t rows;
  const uint32_t* positions; /* absolute position of each row; valid until the next stage call */
  const void* k;
  const void* v;
} kvtier_staged_layer;

/* Rows and bytes a stage of this sequence needs now: every staged row, T1 and T2 (the name
 * predates T2). */
KVTIER_API kvtier_status kvtier_sequence_t1_rows(const kvtier_client* client, uint32_t sequence, size_t* out_rows,
                                                 size_t* out_bytes);

/* Stages layer `layer`'s T1 and T2 rows of the sequence into `buffer` (capacity bytes) before
 * that layer's attention: kvtier_stage_prefetch, then kvtier_stage_wait. */
KVTIER_API kvtier_status kvtier_stage_layer(kvtier_client* client, uint32_t sequence, uint32_t layer,
                                            kvtier_staging_order order, void* buffer, size_t capacity,
                                            kvtier_staged_layer* out);

/* Layer-wise double buffering. kvtier_stage_prefetch issues layer's staging into `buffer` and
 * returns (CUDA: on the library's copy stream; the CPU backend copies before returning);
 * kvtier_stage_wait completes it and fills *out. An engine prefetches layer l + 1 into a second
 * buffer while layer l computes, so staging takes two layers of memory:
 *
 *   prefetch(0, buf[0]); for l: { if l + 1 < L: prefetch(l + 1, buf[(l + 1) % 2]); wait(l); attention(l) }
 *
 * At most two layers in flight per sequence; a layer already in flight, a third one, a wait for a
 * layer not prefetched, or kvtier_plan_execute while one is in flight: KVTIER_E_BAD_STATE. out's
 * positions stay valid until the second prefetch after it (its slot is reused). */
KVTIER_API kvtier_status kvtier_stage_prefetch(kvtier_client* client, uint32_t sequence, uint32_t layer,
                                               kvtier_staging_order order, void* buffer, size_t capacity);
KVTIER_API kvtier_status kvtier_stage_wait(kvtier_client* client, uint32_t sequence, uint32_t layer,
                                           kvtier_staged_layer* out);

/* Where kvtier_stage_layer_at writes: the engine's view of one layer's keys and values indexed by
 * position (e.g. HF's [kv_heads, length, head_dim] K and V of one batch row). KV head h of the
 * row of absolute position p starts at k + (p + row_offset) * token_stride + h * head_stride (V
 * likewise from v); every p + row_offset must be below rows. Host memory. */
typedef struct kvtier_stage_target {
  size_t struct_size;
  uintptr_t k, v;
  size_t rows;
  size_t token_stride, head_stride; /* bytes */
  size_t row_offset;
} kvtier_stage_target;

KVTIER_API void kvtier_stage_target_init(kvtier_stage_target* target);

/* Stages layer `layer`'s T1 and T2 rows (T2 dequantized) straight to their positions in
 * `target`, one copy per row and no staging buffer: for an engine that assembles each layer's
 * keys and values in position order itself. Complete when it returns. CPU backend only
 * (KVTIER_E_UNAVAILABLE on CUDA: prefetch, which overlaps with compute); KVTIER_E_INVALID_ARGUMENT,
 * nothing written, for a position outside the target; KVTIER_E_BAD_STATE while a layer of the
 * sequence is prefetched. */
KVTIER_API kvtier_status kvtier_stage_layer_at(kvtier_client* client, uint32_t sequence, uint32_t layer,
                                               const kvtier_stage_target* target);

/* One decode query's attention over a layer's rows where they live, computed on the CPU, nothing
 * copied (DESIGN §6): the attached cache's slots t0_slots[0..t0_count) (may be none), then the
 * sequence's T1 and T2 rows (T2 dequantized) in ascending positions. A slot holds n = the cache's
 * head_dim / head_dim tokens back to back per head (1, unless the engine's slot is a block of
 * tokens, as vLLM's); the rows i are those tokens: the first t0_tokens of the T0 slots (0: all
 * t0_count * n; only the last slot may give fewer, e.g. the block being written), then every
 * host row's n. For query head h (KV head h / (q_heads / num_kv_heads)) and rows i,
 * s_i = scale * q_h . k_i:
 *   lse_h = ln sum_i exp(s_i)     p_hi = exp(s_i - lse_h)     out_h = sum_i p_hi * v_i
 * With only some keys given (e.g. no t0_slots), (out, lse) merges with the engine's attention
 * over the others (part A): lse = ln(exp(lse_A) + exp(lse_B)),
 * out = exp(lse_A - lse) * out_A + exp(lse_B - lse) * out_B.
 * q: q_heads rows of head_dim float32 (head_dim: the attached cache's or a divisor of it), head h
 * at q + h * head_dim. keys_dim_major nonzero: a slot's keys are stored dim-major per head (element
 * e of token t at e * n + t, as vLLM's CPU backend stores a block's keys); values are token-major.
 * Results, float32 in host memory: out [q_heads, head_dim]; lse [q_heads] (natural log; -inf with
 * no rows, out then 0); when not NULL, probs [q_heads, probs_stride >= rows]: p_hi at
 * probs[h * probs_stride + i]; scores [scores_count == rows]: scores[i] += p_hi for every h
 * (e.g. summed over a step's layers). Rows are cut into chunks of 64 run on a few library
 * threads; the same rows give the same bits whatever the number of threads or the instruction set. */
typedef struct kvtier_attention {
  size_t struct_size;
  const float* q;
  uint32_t q_heads, head_dim;
  float scale;
  const uint32_t* t0_slots;
  size_t t0_count;
  float* out;
  float* lse;
  float* probs;
  size_t probs_stride;
  float* scores;
  size_t scores_count;
  size_t t0_tokens;
  uint32_t keys_dim_major;
} kvtier_attention;

KVTIER_API void kvtier_attention_init(kvtier_attention* attention);

/* Runs `attention` over layer `layer`, complete when it returns. CPU backend only
 * (KVTIER_E_UNAVAILABLE on CUDA); KVTIER_E_INVALID_ARGUMENT, nothing written, for a bad layer, slot,
 * query, t0_tokens, probs_stride or scores_count; KVTIER_E_BAD_STATE while a layer of the sequence
 * is prefetched. */
KVTIER_API kvtier_status kvtier_attend(kvtier_client* client, uint32_t sequence, uint32_t layer,
                                       const kvtier_attention* attention);

/* The engine's compute stream for this sequence's copies (a cudaStream_t; 0 = none, the default).
 * With one, copies wait for the work already queued on it before touching memory, restored
 * tokens are complete before work queued after kvtier_plan_execute, and kvtier_stage_wait makes
 * the stream wait for the staging instead of blocking the host. The CPU backend ignores it.
 * Needs an attached cache. */
KVTIER_API kvtier_status kvtier_sequence_set_stream(kvtier_client* client, uint32_t sequence, uintptr_t stream);

/* ---- handing a sequence to another process ---------------------------------------------
 *
 * An engine process (the exporter) hands one sequence, with its tier state and host rows, to
 * another engine process on the node (the adopter), e.g. from a prefill worker to a decode
 * worker. The exporter's cache stays in place until the adopter has copied it:
 *
 *   exporter: kvtier_sequence_export -> token; give the token to the adopter (out of band); keep
 *             the cache alive and the sequence open until the adopter is done; then close it.
 *   adopter:  kvtier_sequence_adopt(token) -> a sequence of its own; attach its own cache; the
 *             next plan for that sequence (poll it) is the hand-off: execute it and ack it.
 *
 * The hand-off plan moves every live token: KVTIER_TPEER -> T0 copies the token from the
 * exporter's cache slot src_slot into hbm_slots[i]; KVTIER_TPEER -> T1 / T2 names the adopter's
 * pool slot dst_slot, which kvtierd has already filled from the exporter's host rows. Positions
 * it does not name were evicted (T3) or not yet seen. Acknowledged as applied, the exporter's
 * host rows are freed; as failed, the adopter's copy is dropped (close it) and the token may be
 * adopted again. kvtier_sequence_close on the exporter's side cancels the export while no adopter
 * holds it, is refused with KVTIER_E_BAD_STATE while the hand-off plan is in flight (an ack the
 * adopter has already written counts: kvtierd reads it before deciding), and closes the emptied
 * sequence afterwards. One allocation per sequence: an engine whose layers live in
 * separate allocations cannot export (yet). */

typedef enum kvtier_buffer_kind {
  KVTIER_BUFFER_HOST_FD = 0,    /* shared host memory (memfd, shm); fd names it */
  KVTIER_BUFFER_CUDA_IPC = 1,   /* a cudaMalloc allocation starting at base (cudaIpcGetMemHandle) */
  KVTIER_BUFFER_CUDA_VMM_FD = 2 /* a cuMem VMM allocation exported as a POSIX fd (fd) */
} kvtier_buffer_kind;

/* The one allocation holding the sequence's attached cache (kvtier_sequence_attach_cache): every
 * layer's K and V slots lie within [base, base + bytes). */
typedef struct kvtier_export_buffer {
  size_t struct_size;
  kvtier_buffer_kind kind;
  int fd;             /* HOST_FD and CUDA_VMM_FD: the library sends a copy; the caller keeps fd */
  uintptr_t base;     /* the allocation's start in this process (host or device address) */
  uint64_t bytes;     /* its size */
  uint64_t buffer_id; /* CUDA_VMM_FD: this process's name for the allocation (the adopter caches
                         the mapping under pid + id); otherwise ignored */
} kvtier_export_buffer;

KVTIER_API void kvtier_export_buffer_init(kvtier_export_buffer* buffer);

/* Freezes the sequence in kvtierd (no more plans; scores for it are ignored) and returns the
 * token an adopter presents. t0_positions (ascending) must be exactly the positions the sequence
 * holds in T0 and t0_slots their slots in the attached cache. KVTIER_E_BAD_STATE while a plan for
 * the sequence is in flight (execute and ack it, then export again) or when it is already
 * exported; KVTIER_E_INVALID_ARGUMENT naming the field for a buffer that does not hold the
 * attached cache or a T0 list that differs from kvtierd's. */
KVTIER_API kvtier_status kvtier_sequence_export(kvtier_client* client, uint32_t sequence,
                                                const kvtier_export_buffer* buffer, const uint32_t* t0_positions,
                                                const uint32_t* t0_slots, size_t t0_count, uint64_t* out_token);

typedef struct kvtier_adopted {
  size_t struct_size;
  uint32_t sequence;      /* the adopted sequence's id in this client */
  uint32_t prompt_length;
  uint32_t positions;     /* positions the sequence has seen: the next token's position */
  uint32_t exporter_pid;
  /* Since protocol 1.3 (a 1.2 kvtierd sends neither: PAPER and 16). The sequence keeps the
   * exporter's tier parameters: its policy says which features it takes (kvtier_features_push)
   * and key digests (R_KV) keep the exporter's width, which the library uses for this sequence. */
  kvtier_policy policy;
  uint32_t key_digest_dim;
} kvtier_adopted;

/* Adopts an exported sequence. The adopter must run as the exporter's user or root
 * (KVTIER_E_PERMISSION_DENIED, and the session ends), its model geometry must equal the
 * exporter's (KVTIER_E_INVALID_ARGUMENT naming the field) and its pools must have room for the
 * host rows (KVTIER_E_LIMIT_EXCEEDED); KVTIER_E_NOT_FOUND for an unknown, used or cancelled token. The
 * library opens the exporter's buffer now (KVTIER_E_UNAVAILABLE with the reason when it cannot)
 * and releases it once the hand-off plan is executed or the sequence closed. */
KVTIER_API kvtier_status kvtier_sequence_adopt(kvtier_client* client, uint64_t token, kvtier_adopted* out);


/* ---- engine helpers: no client, no daemon -----------------------------------------------
 *
 * Kernels an engine integration needs around kvtier on the CPU: assembling a layer's rows in
 * position order (kvtier.hf) and per-block attention scores over a paged KV cache when the
 * engine's attention kernel returns no probabilities (vLLM). They take no handle; a failed call
 * leaves its detail where kvtier_client_last_error(NULL) reads it (this thread's). */

/* One layer's keys or values in host memory: `rows` token rows per head; row t of head h starts
 * at base + t * token_stride + h * head_stride (bytes). */
typedef struct kvtier_head_rows {
  void* base; /* const for a source */
  size_t rows;
  size_t token_stride, head_stride;
} kvtier_head_rows;

/* For each i < count and head h < heads: copies row_bytes bytes from row from[i] of head h of src
 * to row to[i] of head h of dst. Runs of consecutive rows become one memcpy per head when both
 * views store a head's rows densely (token_stride == row_bytes). KVTIER_E_INVALID_ARGUMENT,
 * nothing copied, for a NULL view or list or an index outside [0, rows) of its view. The caller
 * keeps dst's rows disjoint from src's. */
KVTIER_API kvtier_status kvtier_copy_rows(const kvtier_head_rows* dst, const kvtier_head_rows* src, size_t heads,
                                          size_t row_bytes, const int64_t* from, const int64_t* to, size_t count);

/* A paged KV cache's keys: element i of key (block b, kv head h, token t of the block), of dtype,
 * at base + (b * block_stride + h * head_stride + t * token_stride + i * dim_stride) elements.
 * vLLM's CPU backend stores a block's keys dim-major: token_stride 1, dim_stride block_size. */
typedef struct kvtier_paged_keys {
  const void* base;
  kvtier_dtype dtype;
  uint32_t num_blocks, kv_heads, block_size, head_dim;
  size_t block_stride, head_stride, token_stride, dim_stride; /* in elements; dim_stride >= 1 */
} kvtier_paged_keys;

/* The batch: queries [tokens, q_heads, head_dim] float32, contiguous; for each of `rows` requests
 * its block ids (block_table[r * table_stride ..], int32), its key count seq_lens[r] and its
 * queries query_start[r] .. query_start[r + 1] (rows + 1 entries, non-decreasing). */
typedef struct kvtier_score_batch {
  const float* query;
  uint32_t tokens, q_heads;
  const int32_t* block_table;
  uint32_t rows, table_stride;
  const int32_t* seq_lens;
  const int32_t* query_start;
  float scale;
} kvtier_score_batch;

/* Per-block attention scores: for each row r, query j (at position seq_lens[r] - queries + j,
 * seeing the keys up to it) and query head h (kv head h / (q_heads / kv_heads)), softmax(scale *
 * q . k) over the keys it sees, averaged over query heads, summed over the row's queries and over
 * each full block's keys into out[r * out_stride + u]; 0 for the other u < out_stride (a partial
 * block is not tiered). out holds rows * out_stride floats. Deterministic. KVTIER_E_INVALID_ARGUMENT,
 * nothing written, when shapes disagree, a block id lies outside [0, num_blocks), a row has more
 * queries than keys or out_stride < table_stride. */
KVTIER_API kvtier_status kvtier_block_scores(const kvtier_paged_keys* keys, const kvtier_score_batch* batch,
                                             float* out, uint32_t out_stride);

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_CACHE_H */
