// make_executor: the one place that knows which backends this build contains.
// KVTIER_KERNELS_WITH_CUDA is a compile definition private to kvtier_kernels_factory (0 or 1), set
// from KVTIER_WITH_CUDA in kernels/CMakeLists.txt.
#include "kvtier/kernels/executor_factory.hpp"

#include <memory>

#include "cpu/cpu_executor.hpp"

#ifndef KVTIER_KERNELS_WITH_CUDA
#error "KVTIER_KERNELS_WITH_CUDA must be defined by kernels/CMakeLists.txt"
#endif
#if KVTIER_KERNELS_WITH_CUDA
#include "kvtier/kernels/cuda/cuda_executor.hpp"
#endif

namespace kvtier::kernels {

bool backend_built(Backend backend) noexcept {
  switch (backend) {
    case Backend::kCpu:
      return true;
    case Backend::kCuda:
      return KVTIER_KERNELS_WITH_CUDA != 0;
  }
  return false;
}

Result<std::unique_ptr<CopyExecutor>> make_executor(Backend backend) {
  switch (backend) {
    case Backend::kCpu:
      return std::unique_ptr<CopyExecutor>(std::make_unique<CpuExecutor>());
    case Backend::kCuda:
#if KVTIER_KERNELS_WITH_CUDA
      // kUnavailable "no CUDA device: <CUDA's reason>" when the build has CUDA but the machine
      // has no usable device (or driver).
      return cuda::make_cuda_executor();
#else
      return make_error(Errc::kUnavailable,
                        "make_executor: this kvtier was built without CUDA (KVTIER_CUDA=OFF or no "
                        "nvcc at configure time); rebuild with -DKVTIER_CUDA=ON or use "
                        "Backend::kCpu");
#endif
  }
  return make_error(Errc::kInvalidArgument, "make_executor: unknown backend");
}

}  // namespace kvtier::kernels
