// backend_name and CopyExecutor's default stage_at and attend (executor.hpp). Naming a backend needs no
// factory: make_executor and backend_built live in kvtier_kernels_factory (executor_factory.cpp).
#include <string>
#include <string_view>

#include "kvtier/kernels/executor.hpp"

namespace kvtier::kernels {

std::string_view backend_name(Backend backend) noexcept {
  switch (backend) {
    case Backend::kCpu:
      return "cpu";
    case Backend::kCuda:
      return "cuda";
  }
  return "unknown";
}

Status CopyExecutor::stage_at(std::uint32_t /*layer*/, std::span<const std::uint32_t> /*slots*/,
                              std::span<const std::uint8_t> /*from_int8*/,
                              std::span<const std::uint32_t> /*positions*/, const PositionTarget& /*target*/) {
  return make_error(Errc::kUnavailable, "stage_at: the " + std::string(backend_name(backend())) +
                                            " backend stages through prefetch only");
}

Status CopyExecutor::attend(std::uint32_t /*layer*/, std::span<const std::uint32_t> /*t0_slots*/,
                            std::size_t /*t0_tokens*/, std::span<const std::uint32_t> /*slots*/, std::span<const std::uint8_t> /*from_int8*/,
                            const HostQuery& /*query*/, const AttendOutput& /*out*/) {
  return make_error(Errc::kUnavailable, "attend: the " + std::string(backend_name(backend())) +
                                            " backend does not attend on the host");
}

}  // namespace kvtier::kernels
