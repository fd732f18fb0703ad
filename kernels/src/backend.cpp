// backend_name (executor.hpp). Naming a backend needs no factory: make_executor and
// backend_built live in kvtier_kernels_factory (executor_factory.cpp).
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

}  // namespace kvtier::kernels
