// HostRegistration and UploadLane (executor_resources.hpp).
#include "executor_resources.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "cuda_check.hpp"

namespace kvtier::kernels::cuda {

// --- HostRegistration --------------------------------------------------------------------------

namespace {

// Ranges this process registered, by page-aligned start: every sequence's executor binds the
// client's same pools, and the first one to go must not unregister pages the others still use.
struct Registered {
  std::size_t bytes = 0;
  std::size_t users = 0;
};
std::mutex registered_mutex;
std::map<std::uintptr_t, Registered> registered_ranges;

}  // namespace

Result<HostRegistration> HostRegistration::create(const void* base, std::size_t bytes) {
  if (base == nullptr || bytes == 0) {
    return make_error(Errc::kInvalidArgument, "host registration: empty range");
  }
  const long page_size = sysconf(_SC_PAGESIZE);
  const std::uintptr_t page = page_size > 0 ? static_cast<std::uintptr_t>(page_size) : 4096;
  const auto begin = reinterpret_cast<std::uintptr_t>(base);
  const std::uintptr_t start = begin & ~(page - 1);
  const std::uintptr_t end = (begin + bytes + page - 1) & ~(page - 1);
  HostRegistration registration;
  void* const start_ptr = reinterpret_cast<void*>(start);
  {
    const std::lock_guard lock(registered_mutex);
    if (auto it = registered_ranges.find(start); it != registered_ranges.end() && it->second.bytes == end - start) {
      ++it->second.users;  // registered by another executor of this process: share it
      registration.registered_ = start_ptr;
    } else {
      const cudaError_t status =
          cudaHostRegister(start_ptr, end - start, cudaHostRegisterMapped | cudaHostRegisterPortable);
      if (status == cudaErrorHostMemoryAlreadyRegistered) {
        (void)cudaGetLastError();  // pinned by its owner (e.g. cudaHostAlloc): use it, leave it
      } else if (status != cudaSuccess) {
        return cuda_error("cudaHostRegister(pool, mapped)", status);
      } else {
        registered_ranges[start] = Registered{end - start, 1};
        registration.registered_ = start_ptr;  // from here on the destructor releases it
      }
    }
  }
  void* device = nullptr;
  if (registration.registered_ != nullptr) {
    KVTIER_CUDA_CHECK(cudaHostGetDevicePointer(&device, start_ptr, 0));
    registration.device_address_ = reinterpret_cast<std::uintptr_t>(device) + (begin - start);
  } else {
    KVTIER_CUDA_CHECK(cudaHostGetDevicePointer(&device, const_cast<void*>(base), 0));
    registration.device_address_ = reinterpret_cast<std::uintptr_t>(device);
  }
  return registration;
}

HostRegistration::~HostRegistration() {
  if (registered_ == nullptr) return;
  const std::lock_guard lock(registered_mutex);
  auto it = registered_ranges.find(reinterpret_cast<std::uintptr_t>(registered_));
  if (it == registered_ranges.end() || --it->second.users != 0) return;  // another executor still uses it
  registered_ranges.erase(it);
  if (cudaHostUnregister(registered_) != cudaSuccess) (void)cudaGetLastError();
}

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : registered_(std::exchange(other.registered_, nullptr)),
      device_address_(std::exchange(other.device_address_, 0)) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
  if (this != &other) {
    HostRegistration old(std::move(*this));
    registered_ = std::exchange(other.registered_, nullptr);
    device_address_ = std::exchange(other.device_address_, 0);
  }
  return *this;
}

// --- UploadLane --------------------------------------------------------------------------------

Result<UploadLane> UploadLane::create() {
  UploadLane lane;
  auto event = Event::create();
  if (!event) return tl::unexpected(event.error());
  lane.uploaded_ = std::move(*event);
  return lane;
}

Result<std::uintptr_t> UploadLane::upload(const void* src, std::size_t bytes, cudaStream_t stream) {
  // The previous upload's source bytes must have been read before they are overwritten.
  if (pending_) {
    if (auto s = uploaded_.synchronize(); !s) return tl::unexpected(s.error());
    pending_ = false;
  }
  if (bytes > host_.size()) {
    // Work queued earlier may still read the old device table: drain before freeing it.
    KVTIER_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::size_t capacity = std::max({bytes, 2 * host_.size(), std::size_t{64} << 10});
    auto host = PinnedBuffer::allocate(capacity);
    if (!host) return tl::unexpected(host.error());
    auto device = DeviceBuffer::allocate(capacity);
    if (!device) return tl::unexpected(device.error());
    host_ = std::move(*host);
    device_ = std::move(*device);
  }
  std::memcpy(host_.data(), src, bytes);
  KVTIER_CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<void*>(device_.address()), host_.data(), bytes,
                                    cudaMemcpyHostToDevice, stream));
  if (auto s = uploaded_.record(reinterpret_cast<std::uintptr_t>(stream)); !s) {
    return tl::unexpected(s.error());
  }
  pending_ = true;
  return device_.address();
}

}  // namespace kvtier::kernels::cuda
