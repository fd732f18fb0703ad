/* kvtier/cache.h compiles on its own (it brings kvtier/client.h): an engine needs no admin header. */
#include "kvtier/cache.h"

#ifdef KVTIER_ADMIN_H
#error "kvtier/cache.h must not include the admin header"
#endif

size_t kvtier_abi_cache_options_size(void);
size_t kvtier_abi_cache_options_size(void) { return sizeof(kvtier_sequence_options); }
