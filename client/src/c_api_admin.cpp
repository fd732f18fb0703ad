// The C ABI's admin part (kvtier.h "admin"): daemon status, events and sequence placement, each
// result one allocation freed by its _free function.
#include "c_api_guard.hpp"

using kvtier::client::fail;
using kvtier::client::guarded;

extern "C" {

kvtier_status kvtier_daemon_status_get(kvtier_client* client, kvtier_daemon_status** out) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (out == nullptr) return fail(client, {kvtier::Errc::kInvalidArgument, "out is NULL"});
    auto status = c.daemon_status();
    if (!status) return fail(client, status.error());
    *out = *status;
    return KVTIER_OK;
  });
}

void kvtier_daemon_status_free(kvtier_daemon_status* status) {
  if (status != nullptr) kvtier::client::free_daemon_status(status);
}

kvtier_status kvtier_daemon_events_get(kvtier_client* client, uint32_t limit, kvtier_daemon_events** out) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (out == nullptr) return fail(client, {kvtier::Errc::kInvalidArgument, "out is NULL"});
    auto events = c.daemon_events(limit);
    if (!events) return fail(client, events.error());
    *out = *events;
    return KVTIER_OK;
  });
}

void kvtier_daemon_events_free(kvtier_daemon_events* events) {
  if (events != nullptr) kvtier::client::free_daemon_events(events);
}

kvtier_status kvtier_sequence_placement_get(kvtier_client* client, uint32_t client_id, uint32_t sequence_id,
                                            uint32_t first_position, uint32_t max_runs,
                                            kvtier_sequence_placement** out) {
  return guarded(client, [&](kvtier::client::Client& c) {
    if (out == nullptr) return fail(client, {kvtier::Errc::kInvalidArgument, "out is NULL"});
    auto page = c.sequence_placement(client_id, sequence_id, first_position, max_runs);
    if (!page) return fail(client, page.error());
    *out = *page;
    return KVTIER_OK;
  });
}

void kvtier_sequence_placement_free(kvtier_sequence_placement* placement) {
  if (placement != nullptr) kvtier::client::free_sequence_placement(placement);
}

}  // extern "C"
