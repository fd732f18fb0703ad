// The few CUDA driver API (libcuda) entry points the cuMem POSIX-fd IPC path needs, looked up at
// run time through the runtime (cudaGetDriverEntryPointByVersion). Nothing in kvtier links libcuda:
// a binary linked to it does not even start on a machine without a driver, and our tests must start
// there to skip. Private to kvtier_kernels_cuda.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "driver_error.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::kernels::cuda {

// Members are named after the driver functions, so messages and greps match CUDA's docs. Each PFN
// is the ABI version named in its type, requested by that version number.
struct DriverApi {
  PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
  PFN_cuGetErrorString_v6000 cuGetErrorString = nullptr;
  PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity = nullptr;
  PFN_cuMemCreate_v10020 cuMemCreate = nullptr;
  PFN_cuMemRelease_v10020 cuMemRelease = nullptr;
  PFN_cuMemAddressReserve_v10020 cuMemAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 cuMemAddressFree = nullptr;
  PFN_cuMemMap_v10020 cuMemMap = nullptr;
  PFN_cuMemUnmap_v10020 cuMemUnmap = nullptr;
  PFN_cuMemSetAccess_v10020 cuMemSetAccess = nullptr;
  PFN_cuMemRetainAllocationHandle_v11000 cuMemRetainAllocationHandle = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 cuMemExportToShareableHandle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 cuMemImportFromShareableHandle = nullptr;
};

// The entry points, looked up on first use and kept for the life of the process (they are the
// driver's addresses, which cannot change while it is loaded; a lookup that failed stays failed for
// the same reason). kUnavailable "no CUDA device: ..." naming the missing entry point and CUDA's
// reason when there is no driver or it lacks one. Thread-safe.
Result<const DriverApi*> driver_api();

// The Error for a failed driver call (driver_error.hpp), with the driver's name and text.
tl::unexpected<Error> driver_failure(const DriverApi& api, std::string_view call, CUresult status);

// The current device (an ordinal), with its primary context initialized and current on this thread,
// as driver calls need. "no CUDA device: ..." when no device is usable.
Result<int> current_device_with_context();

// The allocation properties of device memory kvtier exports: pinned, on `device`, shareable as a
// POSIX fd.
CUmemAllocationProp posix_fd_allocation_prop(int device);

// Maps an allocation read-write for `device` at a newly reserved address and returns it. Takes
// `handle`: it is released here in every case (the mapping keeps the memory alive until
// unmap_allocation). On failure everything done so far is undone.
Result<std::uintptr_t> map_allocation(const DriverApi& api, CUmemGenericAllocationHandle handle,
                                      std::size_t bytes, int device);

// Undoes map_allocation. Failures are ignored: nothing better can be done in a destructor.
void unmap_allocation(const DriverApi& api, std::uintptr_t address, std::size_t bytes) noexcept;

}  // namespace kvtier::kernels::cuda

// Calls api.FN(args...) and returns driver_failure naming FN from the enclosing function (which
// returns Status or Result<T>) when it fails.
#define KVTIER_CU_CHECK(api, fn, ...)                                               \
  do {                                                                              \
    if (const CUresult kvtier_cu_status = (api).fn(__VA_ARGS__);                    \
        kvtier_cu_status != CUDA_SUCCESS) {                                         \
      return ::kvtier::kernels::cuda::driver_failure((api), #fn, kvtier_cu_status); \
    }                                                                               \
  } while (0)
