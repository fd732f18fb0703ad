// How a CUDA driver API failure (a CUresult) becomes a kvtier::Error. CUDA-free so that machines
// without CUDA test the mapping: the codes below are CUresult values, checked against <cuda.h> by
// static_asserts in driver_api.cpp. Private to the backend.
#pragma once

#include <string_view>

#include "kvtier/base/error.hpp"

namespace kvtier::kernels::cuda {

// The CUresult values the mapping tells apart.
namespace driver_code {
inline constexpr int kSuccess = 0;                 // CUDA_SUCCESS
inline constexpr int kOutOfMemory = 2;             // CUDA_ERROR_OUT_OF_MEMORY
inline constexpr int kNotInitialized = 3;          // CUDA_ERROR_NOT_INITIALIZED
inline constexpr int kDeinitialized = 4;           // CUDA_ERROR_DEINITIALIZED
inline constexpr int kStubLibrary = 34;            // CUDA_ERROR_STUB_LIBRARY
inline constexpr int kRequiresNewerDriver = 36;    // CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER
inline constexpr int kNoDevice = 100;              // CUDA_ERROR_NO_DEVICE
inline constexpr int kSystemDriverMismatch = 803;  // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
inline constexpr int kCompatUnsupported = 804;     // CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
}  // namespace driver_code

// "<call>: <name>: <text>" for a failed driver call; `name` and `text` are cuGetErrorName and
// cuGetErrorString's answers (empty when the driver knows no name; the number is shown then).
// kLimitExceeded for out-of-memory; kUnavailable for everything else, a peer's bad fd included (the
// peer's buffer is unavailable, whatever the cause). Codes that mean no usable driver or device get
// the backend's common prefix "no CUDA device: ", which tests use to skip.
// Precondition: code != kSuccess.
Error driver_error(std::string_view call, int code, std::string_view name, std::string_view text);

}  // namespace kvtier::kernels::cuda
