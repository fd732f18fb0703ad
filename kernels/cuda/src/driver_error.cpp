// driver_error (driver_error.hpp).
#include "driver_error.hpp"

#include <string>

namespace kvtier::kernels::cuda {
namespace {

bool means_no_device(int code) {
  switch (code) {
    case driver_code::kNotInitialized:
    case driver_code::kDeinitialized:
    case driver_code::kStubLibrary:
    case driver_code::kRequiresNewerDriver:
    case driver_code::kNoDevice:
    case driver_code::kSystemDriverMismatch:
    case driver_code::kCompatUnsupported:
      return true;
    default:
      return false;
  }
}

}  // namespace

Error driver_error(std::string_view call, int code, std::string_view name, std::string_view text) {
  std::string message = means_no_device(code) ? "no CUDA device: " : "";
  message += call;
  message += ": ";
  message += name.empty() ? "CUresult " + std::to_string(code) : std::string(name);
  if (!text.empty()) {
    message += ": ";
    message += text;
  }
  const Errc errc = code == driver_code::kOutOfMemory ? Errc::kLimitExceeded : Errc::kUnavailable;
  return Error{errc, std::move(message)};
}

}  // namespace kvtier::kernels::cuda
