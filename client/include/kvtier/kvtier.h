/* libkvtier: the client library of kvtier, as a stable C ABI.
 *
 * An inference process connects to kvtierd over its Unix socket, registers its model's KV
 * geometry (the daemon then creates this client's shared-memory pool), opens one sequence per
 * request, streams per-token attention scores every decode step, receives tier plans and
 * acknowledges them after executing the copies. kvtierctl uses the same handle with the admin
 * role to read the daemon's status.
 *
 * Conventions: every fallible function returns kvtier_status; results come back through
 * out-parameters; options structs start with struct_size and are filled by their _init
 * function; nothing throws across this boundary; whatever the library allocates for the caller
 * has a matching _free function. After a failed call, kvtier_client_last_error() describes it.
 *
 * Thread-safety: a kvtier_client handle is used by one thread at a time (the score ring has a
 * single producer, the plan ring a single consumer). Different handles are independent.
 */
#ifndef KVTIER_KVTIER_H
#define KVTIER_KVTIER_H

/* The C ABI in three headers: the handle and connection (client.h), what engines use (cache.h),
 * the admin views (admin.h). An engine may include kvtier/cache.h alone, an admin tool
 * kvtier/admin.h. */
#include "kvtier/admin.h"
#include "kvtier/cache.h"
#include "kvtier/client.h"

#endif /* KVTIER_KVTIER_H */
