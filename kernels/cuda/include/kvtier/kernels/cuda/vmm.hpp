// VmmBuffer: device memory allocated through CUDA's virtual memory management (cuMemCreate,
// reserve, map, set access) with a POSIX fd as its shareable handle type, so that export_vmm_buffer
// (ipc.hpp) can hand it to another process. It is what a VMM allocator (e.g. PyTorch's expandable
// segments) produces, for tests and for clients that want exportable KV buffers. No CUDA types
// here; the address is a device pointer usable with every copy in device.hpp.
//
// The driver API is reached at run time (nothing links libcuda), so without a driver or device
// every call is kUnavailable "no CUDA device: ...".
//
// Thread-safety: one thread at a time uses a buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/base/error.hpp"

namespace kvtier::kernels::cuda {

// The allocation granularity of exportable VMM memory on the current device (sizes are rounded up
// to a multiple of it; typically 2 MiB).
Result<std::size_t> vmm_granularity();

// VMM device memory on the current device, read-write there, unmapped and freed on destruction.
class VmmBuffer {
 public:
  // At least `bytes` bytes (rounded up to vmm_granularity()); an empty buffer for 0. Errors:
  // kUnavailable "no CUDA device: ..." without a driver or device, or naming the device when it
  // supports no VMM or no POSIX-fd export; kLimitExceeded out of memory; kUnavailable naming the
  // failing driver call otherwise.
  static Result<VmmBuffer> allocate(std::size_t bytes);
  VmmBuffer() = default;
  // Precondition: no queued work still uses the buffer (like cudaFree, minus its implicit sync).
  ~VmmBuffer();
  VmmBuffer(VmmBuffer&& other) noexcept;
  VmmBuffer& operator=(VmmBuffer&& other) noexcept;
  VmmBuffer(const VmmBuffer&) = delete;
  VmmBuffer& operator=(const VmmBuffer&) = delete;

  std::uintptr_t address() const noexcept { return address_; }
  // The allocation's size, a multiple of the granularity: what export_vmm_buffer needs.
  std::size_t size() const noexcept { return size_; }

 private:
  void reset() noexcept;

  std::uintptr_t address_ = 0;
  std::size_t size_ = 0;
};

}  // namespace kvtier::kernels::cuda
