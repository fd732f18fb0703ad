// Checked CUDA calls: every runtime call goes through KVTIER_CUDA_CHECK, which turns a failure
// into kvtier::Error "<call>: <cudaErrorName>: <description>" and returns it from the enclosing
// function (which must return Status or Result<T>). Private to kvtier_kernels_cuda.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <string_view>

#include "kvtier/base/error.hpp"

namespace kvtier::kernels::cuda {

// kInvalidArgument for bad values, kLimitExceeded for out-of-memory, kUnavailable otherwise
// (no device or driver, launch failures, device faults). Clears the runtime's last error, so a
// failure the caller has handled does not resurface in an unrelated later check.
inline tl::unexpected<Error> cuda_error(std::string_view what, cudaError_t status) {
  (void)cudaGetLastError();
  Errc code = Errc::kUnavailable;
  if (status == cudaErrorInvalidValue) code = Errc::kInvalidArgument;
  if (status == cudaErrorMemoryAllocation) code = Errc::kLimitExceeded;
  return make_error(code, std::string(what) + ": " + cudaGetErrorName(status) + ": " +
                              cudaGetErrorString(status));
}

}  // namespace kvtier::kernels::cuda

#define KVTIER_CUDA_CHECK(call)                                                             \
  do {                                                                                      \
    if (const cudaError_t kvtier_cuda_status = (call); kvtier_cuda_status != cudaSuccess) { \
      return ::kvtier::kernels::cuda::cuda_error(#call, kvtier_cuda_status);                \
    }                                                                                       \
  } while (0)

// After a <<<...>>> launch: configuration errors surface through cudaGetLastError.
#define KVTIER_CUDA_CHECK_LAUNCH(kernel_name)                                                \
  do {                                                                                       \
    if (const cudaError_t kvtier_cuda_status = cudaGetLastError();                           \
        kvtier_cuda_status != cudaSuccess) {                                                 \
      return ::kvtier::kernels::cuda::cuda_error("launch " kernel_name, kvtier_cuda_status); \
    }                                                                                        \
  } while (0)
