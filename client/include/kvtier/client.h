/* libkvtier, part 1 of 3 (kvtier.h includes all three): the handle, status codes and the
 * connection to kvtierd, shared by engines (kvtier/cache.h) and admin tools (kvtier/admin.h).
 * The conventions and thread-safety of the whole C ABI are stated in kvtier.h. */
#ifndef KVTIER_CLIENT_H
#define KVTIER_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#if defined(KVTIER_BUILDING_LIBRARY)
#define KVTIER_API __attribute__((visibility("default")))
#else
#define KVTIER_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Mirrors kvtier::Errc (the wire codes); append only. */
typedef enum kvtier_status {
  KVTIER_OK = 0,
  KVTIER_E_INVALID_ARGUMENT = 1,
  KVTIER_E_VERSION_MISMATCH = 2,
  KVTIER_E_PROTOCOL = 3,
  KVTIER_E_LIMIT_EXCEEDED = 4,
  KVTIER_E_NOT_FOUND = 5,
  KVTIER_E_PERMISSION_DENIED = 6,
  KVTIER_E_UNAVAILABLE = 7, /* daemon unreachable or gone */
  KVTIER_E_OS = 8,
  KVTIER_E_BAD_STATE = 9,
  KVTIER_E_INTERNAL = 10,
  KVTIER_E_TIMEOUT = 11 /* a wait ended without result; not a failure of the session */
} kvtier_status;

/* Static name of a status ("ok", "version_mismatch", ...). Never NULL. */
KVTIER_API const char* kvtier_status_string(kvtier_status status);

typedef enum kvtier_dtype { KVTIER_DTYPE_F16 = 0, KVTIER_DTYPE_BF16 = 1, KVTIER_DTYPE_F32 = 2 } kvtier_dtype;
typedef enum kvtier_role { KVTIER_ROLE_ENGINE = 0, KVTIER_ROLE_ADMIN = 1 } kvtier_role;

typedef struct kvtier_client kvtier_client;

typedef struct kvtier_connect_options {
  size_t struct_size;
  const char* socket_path; /* NULL: $KVTIER_SOCKET, else the default path */
  const char* client_name; /* shown by kvtierctl; NULL: "pid-<pid>". kvtierd refuses (connect fails
                              with KVTIER_E_INVALID_ARGUMENT) a name over 63 bytes, not UTF-8 or
                              holding a control character (C0, DEL, C1) */
  kvtier_role role;
} kvtier_connect_options;

KVTIER_API void kvtier_connect_options_init(kvtier_connect_options* options);

/* The socket path used when none is given: $KVTIER_SOCKET or /run/kvtier/kvtierd.sock. */
KVTIER_API const char* kvtier_default_socket_path(void);

/* Connects and performs the version handshake. On KVTIER_E_VERSION_MISMATCH *out is still
 * set (so kvtier_client_last_error and kvtier_client_versions name both sides); free it. */
KVTIER_API kvtier_status kvtier_client_connect(const kvtier_connect_options* options, kvtier_client** out);
KVTIER_API void kvtier_client_free(kvtier_client* client);

/* Detail of the last failed call on this handle; valid until the next call. Never NULL. With
 * client == NULL: the detail of this thread's last failed call made without a handle
 * (kvtier_client_connect, and the engine helpers of kvtier/cache.h). */
KVTIER_API const char* kvtier_client_last_error(const kvtier_client* client);

typedef struct kvtier_versions {
  size_t struct_size;
  uint16_t client_protocol_major, client_protocol_minor;
  uint32_t client_layout_version;
  uint64_t client_layout_fingerprint;
  uint16_t daemon_protocol_major, daemon_protocol_minor;
  uint32_t daemon_layout_version;
  uint64_t daemon_layout_fingerprint;
  uint64_t daemon_epoch;
  uint32_t client_id;
  char daemon_version[32];
} kvtier_versions;

KVTIER_API kvtier_status kvtier_client_versions(const kvtier_client* client, kvtier_versions* out);


/* Vocabulary an engine sets and the admin views report. */

typedef enum kvtier_eviction_mode {
  KVTIER_EVICT_CUMULATIVE = 0,      /* evict_ratio = fraction of the managed chain ever destroyed */
  KVTIER_EVICT_PAPER_ALGORITHM = 1, /* evict_ratio re-applied every round (compounds), as Algorithm 1 */
  KVTIER_EVICT_PAPER_PROTOTYPE = 2  /* ratios applied to GPU-resident tokens only, as the prototype */
} kvtier_eviction_mode;

/* Which tokens matter (daemon/tier/include/kvtier/tier/policy.hpp documents each). */
typedef enum kvtier_policy {
  KVTIER_POLICY_PAPER = 0,         /* cumulative attention */
  KVTIER_POLICY_H2O = 1,           /* accumulated attention: heavy hitters + recent */
  KVTIER_POLICY_STREAMING_LLM = 2, /* sinks + window */
  KVTIER_POLICY_RANDOM = 3,        /* keep the prompt, uniform random over the rest */
  KVTIER_POLICY_VASE = 4,          /* largest value ranges + sampling by recent attention; needs value ranges */
  KVTIER_POLICY_R_KV = 5           /* importance minus key redundancy; needs key digests */
} kvtier_policy;

/* Why the daemon last kept tokens in T0 for lack of a host row. */
typedef enum kvtier_backpressure {
  KVTIER_BACKPRESSURE_NONE = 0,
  KVTIER_BACKPRESSURE_POOL_FULL = 1,  /* this client's DDR pool is full */
  KVTIER_BACKPRESSURE_NODE_BUDGET = 2 /* the node-wide DDR budget is spent */
} kvtier_backpressure;

typedef enum kvtier_tier {
  KVTIER_T0 = 0,
  KVTIER_T1 = 1,
  KVTIER_T2 = 2,
  KVTIER_T3 = 3,
  KVTIER_TPEER = 4 /* from_tier of hand-off moves only: the exporter's cache (kvtier_sequence_adopt) */
} kvtier_tier;

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_CLIENT_H */
