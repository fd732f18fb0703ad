/* libkvtier, part 3 of 3 (kvtier.h includes all three): the admin views a client with the admin
 * role reads (kvtierctl): the daemon's status, its newest decisions and a sequence's placement. */
#ifndef KVTIER_ADMIN_H
#define KVTIER_ADMIN_H

#include "kvtier/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- admin ---------------------------------------------------------------------------- */

typedef enum kvtier_handoff {
  KVTIER_HANDOFF_NONE = 0,
  KVTIER_HANDOFF_EXPORTED = 1,   /* frozen in its exporter, waiting for an adopter */
  KVTIER_HANDOFF_ADOPTING = 2,   /* the adopter's hand-off plan is in flight */
  KVTIER_HANDOFF_HANDED_OFF = 3, /* adopted: the exporter's copy holds nothing */
  KVTIER_HANDOFF_ADOPTED = 4     /* this copy came from another process */
} kvtier_handoff;

typedef struct kvtier_sequence_info {
  uint32_t sequence_id;
  uint32_t prompt_length;
  uint32_t tokens;
  uint32_t tokens_t0, tokens_t1, tokens_t2, tokens_t3;
  double destroyed_fraction; /* T3 / managed tokens: the eviction actually applied */
  double hbm_ratio, evict_ratio;
  kvtier_eviction_mode mode;
  kvtier_policy policy;
  double int8_ratio;
  kvtier_handoff handoff;
} kvtier_sequence_info;

typedef struct kvtier_client_info {
  uint32_t client_id;
  uint32_t pid;
  uint32_t uid;
  char name[64];
  char model_name[64];
  uint32_t num_layers, num_kv_heads, head_dim;
  kvtier_dtype dtype;
  uint32_t pool_slots, pool_slots_used;
  uint64_t score_records, scores_dropped, plans_sent, plans_acked, errors;
  uint64_t plans_failed;        /* reported as not applied, rolled back */
  uint64_t moves_sent;          /* token moves in all plans */
  uint64_t backpressure_tokens; /* moves to T1 refused for lack of a host row: the tokens stayed in T0 */
  size_t sequence_count;
  const kvtier_sequence_info* sequences;
  uint32_t weight;             /* share of the node DDR budget */
  uint64_t ddr_bytes_used;     /* T1 rows held, pending plans' destinations included */
  uint64_t ddr_share_bytes;    /* weighted share of the node DDR budget; 0 = no node budget */
  uint32_t int8_slots, int8_slots_used;
  uint64_t t2_demotions;       /* tokens quantized T1 -> T2 by policy (acknowledged) */
  uint64_t pressure_demotions; /* tokens quantized T1 -> T2 to relieve node pressure */
  uint64_t pressure_evictions; /* tokens destroyed (T3) to relieve node pressure */
  uint64_t int8_trimmed;       /* T1 -> T2 moves dropped because the int8 pool was full */
  kvtier_backpressure last_backpressure;
  uint32_t closing; /* 1: its socket closed while its process lives; its pools stay its own until it exits */
} kvtier_client_info;

typedef struct kvtier_daemon_status {
  char daemon_version[32];
  uint64_t daemon_epoch;
  uint64_t uptime_seconds;
  uint64_t ddr_bytes_total; /* 0: no node-wide cap */
  uint64_t ddr_bytes_used;
  size_t client_count;
  const kvtier_client_info* clients;
  uint64_t int8_bytes_total; /* node-wide int8 pool cap; 0 = none */
  uint64_t int8_bytes_used;
  char metrics_address[64]; /* "ADDRESS:PORT" serving Prometheus metrics at /metrics; empty = off */
} kvtier_daemon_status;

/* Admin role only (the daemon checks the peer's credentials). Free with kvtier_daemon_status_free. */
KVTIER_API kvtier_status kvtier_daemon_status_get(kvtier_client* client, kvtier_daemon_status** out);
KVTIER_API void kvtier_daemon_status_free(kvtier_daemon_status* status);

/* What kvtierd decided about its clients (protocol 1.5): one event per decision (a relief plan,
 * a refused admission, a failed plan, a reclaim, an ended session), never one per token. */
typedef enum kvtier_event_kind {
  KVTIER_EVENT_PRESSURE_DEMOTION = 0, /* a relief plan quantized `tokens` T1 rows to T2 */
  KVTIER_EVENT_PRESSURE_EVICTION = 1, /* a relief plan destroyed `tokens` T1 tokens (T3) */
  KVTIER_EVENT_BACKPRESSURE = 2,      /* a plan kept `tokens` tokens where they were; detail: why */
  KVTIER_EVENT_PLAN_FAILED = 3,       /* the client reported a plan as not applied: rolled back */
  KVTIER_EVENT_RECLAIM = 4,           /* the client's process exited; what it held was freed */
  KVTIER_EVENT_SESSION_ERROR = 5      /* kvtierd ended the client's session; detail: the error */
} kvtier_event_kind;

typedef struct kvtier_event {
  uint64_t sequence; /* 1, 2, ...: the order kvtierd recorded events in */
  uint64_t unix_ms;  /* wall-clock time of the decision */
  kvtier_event_kind kind;
  uint32_t client_id;
  char client_name[64];
  uint32_t sequence_id; /* 0: not about one sequence */
  uint64_t tokens;      /* 0: not about tokens */
  char detail[128];     /* the daemon's text, untrusted: escape it before printing */
} kvtier_event;

typedef struct kvtier_daemon_events {
  size_t event_count;
  const kvtier_event* events; /* oldest first */
  uint32_t capacity;          /* events kvtierd keeps; older ones are dropped */
  uint64_t recorded;          /* events recorded since kvtierd started */
} kvtier_daemon_events;

/* The newest `limit` events (1..capacity, 1024 for this kvtierd; KVTIER_E_INVALID_ARGUMENT
 * otherwise). Admin role only. Free with kvtier_daemon_events_free. */
KVTIER_API kvtier_status kvtier_daemon_events_get(kvtier_client* client, uint32_t limit, kvtier_daemon_events** out);
KVTIER_API void kvtier_daemon_events_free(kvtier_daemon_events* events);

/* One run of consecutive positions in one tier (KVTIER_T0..KVTIER_T3). */
typedef struct kvtier_tier_run {
  kvtier_tier tier;
  uint32_t count;
} kvtier_tier_run;

typedef struct kvtier_sequence_placement {
  uint32_t length;         /* positions the sequence has, T3 included */
  uint32_t first_position; /* where the page starts */
  uint32_t next_position;  /* where the next page starts; == length when this one is the last */
  size_t run_count;
  const kvtier_tier_run* runs;
} kvtier_sequence_placement;

/* A page of the committed placement of another client's sequence (protocol 1.5): at most
 * max_runs (1..65536) runs from first_position on. Call again from next_position until it
 * equals length. Admin role only. KVTIER_E_NOT_FOUND for an unknown client or sequence,
 * KVTIER_E_BAD_STATE for an exported sequence whose tier state is the adopter's,
 * KVTIER_E_INVALID_ARGUMENT for max_runs out of range or first_position beyond the length.
 * Free with kvtier_sequence_placement_free. */
KVTIER_API kvtier_status kvtier_sequence_placement_get(kvtier_client* client, uint32_t client_id, uint32_t sequence_id,
                                                       uint32_t first_position, uint32_t max_runs,
                                                       kvtier_sequence_placement** out);
KVTIER_API void kvtier_sequence_placement_free(kvtier_sequence_placement* placement);

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_ADMIN_H */
