// cuMem POSIX-fd export and the CUDA VmmOpener (ipc.hpp).
#include <fcntl.h>

#include <string>

#include "driver_api.hpp"
#include "kvtier/kernels/cuda/ipc.hpp"

namespace kvtier::kernels::cuda {
namespace {

class CudaVmmOpener final : public VmmOpener {
 public:
  Result<std::uintptr_t> open(int fd, std::size_t bytes) override {
    // The driver's answer for a closed fd is a bare invalid-value; say what is wrong instead.
    if (fd < 0 || ::fcntl(fd, F_GETFD) < 0) {
      return make_error(Errc::kUnavailable,
                        "vmm opener: fd " + std::to_string(fd) + " is not open");
    }
    auto device = current_device_with_context();
    if (!device) return tl::unexpected(device.error());
    auto api_or = driver_api();
    if (!api_or) return tl::unexpected(api_or.error());
    const DriverApi& api = **api_or;
    CUmemGenericAllocationHandle handle = 0;
    // The fd is passed by value, cast to the pointer-sized OS handle; the driver does not take it
    // (the caller closes it), and the imported handle keeps the memory alive.
    KVTIER_CU_CHECK(api, cuMemImportFromShareableHandle, &handle,
                    reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)),
                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    return map_allocation(api, handle, bytes, *device);  // takes the handle
  }

  void close(std::uintptr_t address, std::size_t bytes) noexcept override {
    // Only reached for a successful open, so the table is loaded.
    if (auto api = driver_api(); api) unmap_allocation(**api, address, bytes);
  }
};

}  // namespace

Result<VmmExport> export_vmm_buffer(std::uintptr_t device_address, std::size_t bytes) {
  if (device_address == 0 || bytes == 0) {
    return make_error(Errc::kInvalidArgument, "export_vmm_buffer: null address or zero size");
  }
  if (auto device = current_device_with_context(); !device) {
    return tl::unexpected(device.error());
  }
  auto api_or = driver_api();
  if (!api_or) return tl::unexpected(api_or.error());
  const DriverApi& api = **api_or;
  CUmemGenericAllocationHandle handle = 0;
  KVTIER_CU_CHECK(api, cuMemRetainAllocationHandle, &handle,
                  reinterpret_cast<void*>(device_address));
  // The retain above took a reference; give it back whatever the export does.
  struct Release {
    const DriverApi& api;
    CUmemGenericAllocationHandle handle;
    ~Release() { (void)api.cuMemRelease(handle); }
  } release{api, handle};
  int fd = -1;
  KVTIER_CU_CHECK(api, cuMemExportToShareableHandle, &fd, handle,
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  VmmExport exported{UniqueFd(fd), bytes};
  // Keep the fd out of processes this one spawns: only SCM_RIGHTS should carry it.
  if (const int flags = ::fcntl(fd, F_GETFD);
      flags < 0 || ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0) {
    return os_error("export_vmm_buffer: fcntl(FD_CLOEXEC)");
  }
  return exported;
}

std::unique_ptr<VmmOpener> make_cuda_vmm_opener() { return std::make_unique<CudaVmmOpener>(); }

}  // namespace kvtier::kernels::cuda
