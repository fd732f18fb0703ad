// What every C ABI translation unit (c_api.cpp, c_api_admin.cpp, c_api_kernels.cpp) shares: the
// opaque handle's
// definition and the noexcept guard that turns exceptions and kvtier::Error into kvtier_status,
// keeping the detail in the handle's last error. Private to libkvtier.
#pragma once

#include <exception>
#include <memory>
#include <new>
#include <string>

#include "client.hpp"
#include "kvtier/kvtier.h"

struct kvtier_client {
  std::unique_ptr<kvtier::client::Client> impl;
  std::string last_error;
};

namespace kvtier::client {

inline kvtier_status to_status(kvtier::Errc code) { return static_cast<kvtier_status>(code); }

// Detail of this thread's last failed call made without a handle to hold it
// (kvtier_client_connect, the engine helpers); kvtier_client_last_error(NULL) returns it.
inline std::string& thread_error() {
  thread_local std::string detail;
  return detail;
}

inline kvtier_status fail(kvtier_client* client, const kvtier::Error& error) {
  if (client != nullptr) client->last_error = error.message;
  return to_status(error.code);
}

// Runs fn(*client->impl); KVTIER_E_INVALID_ARGUMENT for a NULL or empty handle. Nothing throws
// out of it.
template <class Fn>
kvtier_status guarded(kvtier_client* client, Fn&& fn) noexcept {
  if (client == nullptr || !client->impl) return KVTIER_E_INVALID_ARGUMENT;
  try {
    client->last_error.clear();
    return fn(*client->impl);
  } catch (const std::bad_alloc&) {
    client->last_error = "out of memory";
    return KVTIER_E_INTERNAL;
  } catch (const std::exception& e) {
    client->last_error = e.what();
    return KVTIER_E_INTERNAL;
  } catch (...) {
    client->last_error = "unknown exception";
    return KVTIER_E_INTERNAL;
  }
}

}  // namespace kvtier::client
