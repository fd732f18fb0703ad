// The executor factory: which backends this build contains, and a new executor of one of them.
// Target kvtier_kernels_factory, which links the CPU backend (kvtier_kernels) and, when CUDA is
// built, the CUDA one (kvtier_kernels_cuda); neither backend links the factory. It is the only
// place that knows whether CUDA was built (STYLE 8).
// Thread-safety: both functions may be called from any thread.
#pragma once

#include <memory>

#include "kvtier/kernels/executor.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::kernels {

// True when the backend was compiled into this build (kCpu always).
bool backend_built(Backend backend) noexcept;

// A new executor of the given backend, not yet initialized. kUnavailable with the reason when
// the backend was not built (or cannot run here).
Result<std::unique_ptr<CopyExecutor>> make_executor(Backend backend);

}  // namespace kvtier::kernels
