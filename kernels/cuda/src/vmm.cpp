// VmmBuffer (vmm.hpp).
#include "kvtier/kernels/cuda/vmm.hpp"

#include <string>
#include <utility>

#include "driver_api.hpp"

namespace kvtier::kernels::cuda {
namespace {

Result<std::size_t> granularity_of(const DriverApi& api, const CUmemAllocationProp& prop) {
  std::size_t granularity = 0;
  KVTIER_CU_CHECK(api, cuMemGetAllocationGranularity, &granularity, &prop,
                  CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  return granularity;
}

// kUnavailable naming the device when it cannot make exportable VMM memory: better than the
// invalid-value cuMemCreate would give.
Status check_device_supports_export(const DriverApi& api, int device) {
  CUdevice handle = 0;
  KVTIER_CU_CHECK(api, cuDeviceGet, &handle, device);
  int vmm = 0, posix_fd = 0;
  KVTIER_CU_CHECK(api, cuDeviceGetAttribute, &vmm,
                  CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, handle);
  KVTIER_CU_CHECK(api, cuDeviceGetAttribute, &posix_fd,
                  CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, handle);
  if (vmm == 0 || posix_fd == 0) {
    return make_error(Errc::kUnavailable,
                      "VmmBuffer: device " + std::to_string(device) + " supports no " +
                          (vmm == 0 ? "virtual memory management" : "POSIX-fd memory export"));
  }
  return {};
}

}  // namespace

Result<std::size_t> vmm_granularity() {
  // The device first, so that without one the answer is the backend's usual "no CUDA device".
  auto device = current_device_with_context();
  if (!device) return tl::unexpected(device.error());
  auto api = driver_api();
  if (!api) return tl::unexpected(api.error());
  return granularity_of(**api, posix_fd_allocation_prop(*device));
}

Result<VmmBuffer> VmmBuffer::allocate(std::size_t bytes) {
  VmmBuffer buffer;
  if (bytes == 0) return buffer;
  auto device = current_device_with_context();
  if (!device) return tl::unexpected(device.error());
  auto api_or = driver_api();
  if (!api_or) return tl::unexpected(api_or.error());
  const DriverApi& api = **api_or;
  if (auto s = check_device_supports_export(api, *device); !s) return tl::unexpected(s.error());

  const CUmemAllocationProp prop = posix_fd_allocation_prop(*device);
  auto granularity = granularity_of(api, prop);
  if (!granularity) return tl::unexpected(granularity.error());
  if (*granularity == 0) {
    return make_error(Errc::kUnavailable, "cuMemGetAllocationGranularity: reported 0");
  }
  const std::size_t size = (bytes + *granularity - 1) / *granularity * *granularity;
  if (size < bytes) return make_error(Errc::kLimitExceeded, "VmmBuffer: size overflows");

  CUmemGenericAllocationHandle handle = 0;
  KVTIER_CU_CHECK(api, cuMemCreate, &handle, size, &prop, 0);
  auto address = map_allocation(api, handle, size, *device);  // takes the handle
  if (!address) return tl::unexpected(address.error());
  buffer.address_ = *address;
  buffer.size_ = size;
  return buffer;
}

VmmBuffer::~VmmBuffer() { reset(); }

VmmBuffer::VmmBuffer(VmmBuffer&& other) noexcept
    : address_(std::exchange(other.address_, 0)), size_(std::exchange(other.size_, 0)) {}

VmmBuffer& VmmBuffer::operator=(VmmBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    address_ = std::exchange(other.address_, 0);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void VmmBuffer::reset() noexcept {
  if (address_ == 0) return;
  // A mapped buffer implies the lookup succeeded, so this answers the cached table.
  if (auto api = driver_api(); api) unmap_allocation(**api, address_, size_);
  address_ = 0;
  size_ = 0;
}

}  // namespace kvtier::kernels::cuda
