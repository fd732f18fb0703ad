/* kvtier/admin.h compiles on its own (it brings kvtier/client.h): an admin tool needs no engine header. */
#include "kvtier/admin.h"

#ifdef KVTIER_CACHE_H
#error "kvtier/admin.h must not include the cache header"
#endif

size_t kvtier_abi_admin_status_size(void);
size_t kvtier_abi_admin_status_size(void) { return sizeof(kvtier_daemon_status); }
