#include "kvtier/base/error.hpp"

#include <cerrno>
#include <cstring>

namespace kvtier {

std::string_view errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::kOk: return "ok";
    case Errc::kInvalidArgument: return "invalid_argument";
    case Errc::kVersionMismatch: return "version_mismatch";
    case Errc::kProtocol: return "protocol";
    case Errc::kLimitExceeded: return "limit_exceeded";
    case Errc::kNotFound: return "not_found";
    case Errc::kPermissionDenied: return "permission_denied";
    case Errc::kUnavailable: return "unavailable";
    case Errc::kOsError: return "os_error";
    case Errc::kBadState: return "bad_state";
    case Errc::kInternal: return "internal";
  }
  return "unknown";
}

std::string to_string(const Error& error) {
  std::string out(errc_name(error.code));
  out += ": ";
  out += error.message;
  return out;
}

tl::unexpected<Error> os_error(std::string_view what) {
  const int saved = errno;
  std::string message(what);
  message += ": ";
  message += std::strerror(saved);
  message += " (errno=" + std::to_string(saved) + ")";
  return make_error(Errc::kOsError, std::move(message));
}

}  // namespace kvtier
