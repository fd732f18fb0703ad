// Run-time lookup of the driver entry points (driver_api.hpp) and the shared cuMem mapping steps.
#include "driver_api.hpp"

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "cuda_check.hpp"
#include "kvtier/kernels/cuda/device.hpp"

namespace kvtier::kernels::cuda {
namespace {

// driver_error.hpp stays CUDA-free by spelling these out; keep them honest.
static_assert(driver_code::kSuccess == CUDA_SUCCESS);
static_assert(driver_code::kOutOfMemory == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(driver_code::kNotInitialized == CUDA_ERROR_NOT_INITIALIZED);
static_assert(driver_code::kDeinitialized == CUDA_ERROR_DEINITIALIZED);
static_assert(driver_code::kStubLibrary == CUDA_ERROR_STUB_LIBRARY);
static_assert(driver_code::kRequiresNewerDriver == CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER);
static_assert(driver_code::kNoDevice == CUDA_ERROR_NO_DEVICE);
static_assert(driver_code::kSystemDriverMismatch == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH);
static_assert(driver_code::kCompatUnsupported == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE);

// Stores the entry point `symbol` of ABI version `version` into `out`.
template <typename Fn>
Status load(const char* symbol, unsigned version, Fn& out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t status =
      cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &found);
  const char* lookup = "cudaGetDriverEntryPointByVersion";
#else
  // Before 12.5 the lookup gives each symbol's ABI as of the runtime's version; each symbol here
  // has kept one ABI since it appeared, the one its PFN type names.
  const cudaError_t status = cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &found);
  const char* lookup = "cudaGetDriverEntryPoint";
#endif
  const std::string what =
      std::string(lookup) + "(" + symbol + ", " + std::to_string(version) + ")";
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return make_error(Errc::kUnavailable, "no CUDA device: " + what + ": " +
                                              cudaGetErrorName(status) + ": " +
                                              cudaGetErrorString(status));
  }
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    return make_error(Errc::kUnavailable, "no CUDA device: " + what + ": " +
                                              (found == cudaDriverEntryPointVersionNotSufficent
                                                   ? "the driver is too old for this version"
                                                   : "the driver has no such symbol"));
  }
  out = reinterpret_cast<Fn>(fn);
  return {};
}

Result<DriverApi> load_driver_api() {
  DriverApi api;
  // Each line: the symbol, the ABI version its PFN type names, the member.
  const Status loaded = [&]() -> Status {
    if (auto s = load("cuGetErrorName", 6000, api.cuGetErrorName); !s) return s;
    if (auto s = load("cuGetErrorString", 6000, api.cuGetErrorString); !s) return s;
    if (auto s = load("cuDeviceGet", 2000, api.cuDeviceGet); !s) return s;
    if (auto s = load("cuDeviceGetAttribute", 2000, api.cuDeviceGetAttribute); !s) return s;
    if (auto s = load("cuMemGetAllocationGranularity", 10020, api.cuMemGetAllocationGranularity);
        !s) {
      return s;
    }
    if (auto s = load("cuMemCreate", 10020, api.cuMemCreate); !s) return s;
    if (auto s = load("cuMemRelease", 10020, api.cuMemRelease); !s) return s;
    if (auto s = load("cuMemAddressReserve", 10020, api.cuMemAddressReserve); !s) return s;
    if (auto s = load("cuMemAddressFree", 10020, api.cuMemAddressFree); !s) return s;
    if (auto s = load("cuMemMap", 10020, api.cuMemMap); !s) return s;
    if (auto s = load("cuMemUnmap", 10020, api.cuMemUnmap); !s) return s;
    if (auto s = load("cuMemSetAccess", 10020, api.cuMemSetAccess); !s) return s;
    if (auto s = load("cuMemRetainAllocationHandle", 11000, api.cuMemRetainAllocationHandle); !s) {
      return s;
    }
    if (auto s = load("cuMemExportToShareableHandle", 10020, api.cuMemExportToShareableHandle);
        !s) {
      return s;
    }
    return load("cuMemImportFromShareableHandle", 10020, api.cuMemImportFromShareableHandle);
  }();
  if (!loaded) return tl::unexpected(loaded.error());
  return api;
}

// Owns a reserved address range and what is mapped into it, until dismissed.
class Reservation {
 public:
  Reservation(const DriverApi& api, std::size_t bytes) : api_(api), bytes_(bytes) {}
  ~Reservation() {
    if (mapped_) (void)api_.cuMemUnmap(base_, bytes_);
    if (base_ != 0) (void)api_.cuMemAddressFree(base_, bytes_);
  }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

  CUdeviceptr* base() noexcept { return &base_; }
  void set_mapped() noexcept { mapped_ = true; }
  std::uintptr_t dismiss() noexcept {
    mapped_ = false;
    return static_cast<std::uintptr_t>(std::exchange(base_, 0));
  }

 private:
  const DriverApi& api_;
  std::size_t bytes_;
  CUdeviceptr base_ = 0;
  bool mapped_ = false;
};

}  // namespace

Result<const DriverApi*> driver_api() {
  // Function-local and immutable once built, so no singleton with state (STYLE 8): the table holds
  // the driver's symbol addresses, fixed while the process runs.
  static const Result<DriverApi> api = load_driver_api();
  if (!api) return tl::unexpected(api.error());
  return &*api;
}

tl::unexpected<Error> driver_failure(const DriverApi& api, std::string_view call, CUresult status) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName(status, &name) != CUDA_SUCCESS) name = nullptr;
  if (api.cuGetErrorString(status, &text) != CUDA_SUCCESS) text = nullptr;
  return tl::unexpected(
      driver_error(call, static_cast<int>(status), name ? name : "", text ? text : ""));
}

Result<int> current_device_with_context() {
  if (auto count = device_count(); !count) return tl::unexpected(count.error());
  int device = 0;
  KVTIER_CUDA_CHECK(cudaGetDevice(&device));
  // Since CUDA 12.0, cudaSetDevice initializes the device's primary context and makes it current,
  // which the driver's cuMem calls need.
  KVTIER_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

CUmemAllocationProp posix_fd_allocation_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

Result<std::uintptr_t> map_allocation(const DriverApi& api, CUmemGenericAllocationHandle handle,
                                      std::size_t bytes, int device) {
  // Released on every path: once mapped, the mapping holds its own reference to the memory.
  struct Release {
    const DriverApi& api;
    CUmemGenericAllocationHandle handle;
    ~Release() { (void)api.cuMemRelease(handle); }
  } release{api, handle};

  Reservation reservation(api, bytes);
  KVTIER_CU_CHECK(api, cuMemAddressReserve, reservation.base(), bytes, 0, 0, 0);
  KVTIER_CU_CHECK(api, cuMemMap, *reservation.base(), bytes, 0, handle, 0);
  reservation.set_mapped();
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  KVTIER_CU_CHECK(api, cuMemSetAccess, *reservation.base(), bytes, &access, 1);
  return reservation.dismiss();
}

void unmap_allocation(const DriverApi& api, std::uintptr_t address, std::size_t bytes) noexcept {
  const auto base = static_cast<CUdeviceptr>(address);
  (void)api.cuMemUnmap(base, bytes);
  (void)api.cuMemAddressFree(base, bytes);
}

}  // namespace kvtier::kernels::cuda
