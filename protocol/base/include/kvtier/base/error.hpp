// kvtier error vocabulary shared by every module, the wire protocol and the C ABI.
//
// What can fail because of the OS, a peer or input returns kvtier::Result<T>; broken internal
// invariants fail a KVTIER_CHECK (check.hpp) instead. The numeric values of Errc are part of the
// protocol (Error replies carry them) and of the C ABI (kvtier_status mirrors them): append only,
// never renumber.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <tl/expected.hpp>

namespace kvtier {

enum class Errc : std::uint32_t {
  kOk = 0,
  kInvalidArgument = 1,   // bad input from a caller or peer (geometry, config value, score)
  kVersionMismatch = 2,   // protocol major or shm layout differs
  kProtocol = 3,          // malformed frame or message, unexpected message in this state
  kLimitExceeded = 4,     // a configured limit (clients, sequences, bytes, frame size) reached
  kNotFound = 5,          // unknown sequence, client, epoch, segment
  kPermissionDenied = 6,  // peer credentials, file owner/mode
  kUnavailable = 7,       // daemon unreachable or gone
  kOsError = 8,           // a system call failed (errno in the message)
  kBadState = 9,          // call not valid in the current state (e.g. before register)
  kInternal = 10,         // a bug; reported rather than crashing a peer
};

std::string_view errc_name(Errc code) noexcept;

struct Error {
  Errc code = Errc::kInternal;
  std::string message;
};

template <class T>
using Result = tl::expected<T, Error>;
using Status = Result<void>;

inline tl::unexpected<Error> make_error(Errc code, std::string message) {
  return tl::unexpected<Error>(Error{code, std::move(message)});
}

// "<name>: <message>", for logs and exceptions at the edges.
std::string to_string(const Error& error);

// make_error(kOsError, "<what>: <strerror(errno)> (errno=N)"); reads errno.
tl::unexpected<Error> os_error(std::string_view what);

}  // namespace kvtier
