// CUDA IPC export and the CUDA IpcOpener (ipc.hpp).
#include "kvtier/kernels/cuda/ipc.hpp"

#include <cstring>

#include "cuda_check.hpp"

namespace kvtier::kernels::cuda {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes,
              "IpcHandle must hold exactly one cudaIpcMemHandle_t");

class CudaIpcOpener final : public IpcOpener {
 public:
  Result<std::uintptr_t> open(const IpcHandle& handle) override {
    cudaIpcMemHandle_t native{};
    std::memcpy(&native, handle.data(), sizeof(native));
    void* address = nullptr;
    KVTIER_CUDA_CHECK(cudaIpcOpenMemHandle(&address, native, cudaIpcMemLazyEnablePeerAccess));
    return reinterpret_cast<std::uintptr_t>(address);
  }

  void close(std::uintptr_t address) noexcept override {
    if (cudaIpcCloseMemHandle(reinterpret_cast<void*>(address)) != cudaSuccess) {
      (void)cudaGetLastError();  // the peer's mapping is gone either way
    }
  }
};

}  // namespace

Result<IpcHandle> export_device_buffer(std::uintptr_t device_address) {
  if (device_address == 0) {
    return make_error(Errc::kInvalidArgument, "export_device_buffer: null address");
  }
  cudaIpcMemHandle_t native{};
  KVTIER_CUDA_CHECK(cudaIpcGetMemHandle(&native, reinterpret_cast<void*>(device_address)));
  IpcHandle handle{};
  std::memcpy(handle.data(), &native, sizeof(native));
  return handle;
}

std::unique_ptr<IpcOpener> make_cuda_ipc_opener() { return std::make_unique<CudaIpcOpener>(); }

}  // namespace kvtier::kernels::cuda
