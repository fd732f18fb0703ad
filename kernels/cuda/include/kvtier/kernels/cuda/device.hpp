// Device discovery and small RAII owners of CUDA resources, with no CUDA types in sight, so tests
// and clients can allocate device memory and streams without including a CUDA header.
//
// Every call is checked; failures return kUnavailable (no device, driver or launch problems),
// kLimitExceeded (out of memory) or kInvalidArgument. Handles are integers: a stream's value is
// its cudaStream_t, a buffer's address its device pointer.
// Thread-safety: the owners are used by one thread at a time; device_count is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/kernels/cuda/ipc_cache.hpp"
#include "kvtier/kernels/cuda/vmm_cache.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::kernels::cuda {

// Number of usable CUDA devices (> 0), or kUnavailable "no CUDA device: <CUDA's reason>".
Result<int> device_count();

// The name and compute capability of the current device, e.g. "NVIDIA H200 (sm_90, 132 SMs)".
Result<std::string> device_description();

// Waits for all work on the current device.
Status device_synchronize();

// Synchronous copies between host memory and any device-visible address (unified addressing).
Status copy_to_device(std::uintptr_t device_dst, const void* src, std::size_t bytes);
Status copy_to_host(void* dst, std::uintptr_t device_src, std::size_t bytes);

// Whether `address` lies in host memory registered with (or allocated pinned by) CUDA.
Result<bool> host_memory_registered(const void* address);

// cudaMalloc'd device memory, freed on destruction.
class DeviceBuffer {
 public:
  static Result<DeviceBuffer> allocate(std::size_t bytes);
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::uintptr_t address() const noexcept { return address_; }
  std::size_t size() const noexcept { return size_; }

  // Synchronous copies between host memory and [offset, offset + bytes) of this buffer.
  Status upload(const void* src, std::size_t bytes, std::size_t offset = 0);
  Status download(void* dst, std::size_t bytes, std::size_t offset = 0) const;
  // Synchronously sets every byte.
  Status fill(std::uint8_t value);

 private:
  std::uintptr_t address_ = 0;
  std::size_t size_ = 0;
};

// Page-locked host memory (cudaHostAlloc, mapped and portable), freed on destruction.
class PinnedBuffer {
 public:
  static Result<PinnedBuffer> allocate(std::size_t bytes);
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  // The address kernels use for data() (cudaHostGetDevicePointer).
  Result<std::uintptr_t> device_address() const;

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// A non-blocking CUDA stream, destroyed on destruction.
class Stream {
 public:
  static Result<Stream> create();
  Stream() = default;
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  std::uintptr_t handle() const noexcept { return handle_; }
  Status synchronize() const;

 private:
  std::uintptr_t handle_ = 0;
};

// A CUDA event without timing, destroyed on destruction.
class Event {
 public:
  static Result<Event> create();
  Event() = default;
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  std::uintptr_t handle() const noexcept { return handle_; }
  Status record(std::uintptr_t stream);
  Status synchronize() const;

 private:
  std::uintptr_t handle_ = 0;
};

// ---- peer buffers: device memory shared with another process (sequence hand-off) ----------

// VMM device memory (vmm.hpp VmmBuffer) exported as a POSIX fd (ipc.hpp export_vmm_buffer):
// what a VMM allocator such as PyTorch's expandable segments gives an engine, and what legacy
// CUDA IPC cannot export. For KVTIER_BUFFER_CUDA_VMM_FD. Without CUDA, allocate is kUnavailable
// "no CUDA device: ...".
class ExportableVmmBuffer {
 public:
  // At least `bytes` bytes (rounded up to the VMM granularity), with its fd exported.
  static Result<ExportableVmmBuffer> allocate(std::size_t bytes);
  ExportableVmmBuffer();
  ~ExportableVmmBuffer();
  ExportableVmmBuffer(ExportableVmmBuffer&& other) noexcept;
  ExportableVmmBuffer& operator=(ExportableVmmBuffer&& other) noexcept;
  ExportableVmmBuffer(const ExportableVmmBuffer&) = delete;
  ExportableVmmBuffer& operator=(const ExportableVmmBuffer&) = delete;

  std::uintptr_t address() const noexcept;
  std::size_t size() const noexcept;  // the allocation's size: what the export names
  int fd() const noexcept;            // owned by this object; -1 when empty

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The CUDA IPC handle of the cudaMalloc allocation that starts at `device_address`
// (ipc.hpp: export_device_buffer). kUnavailable with CUDA's reason, or "no CUDA device: ...".
Result<IpcHandle> export_ipc_handle(std::uintptr_t device_address);

// Another process's device buffers opened in this one, by CUDA IPC handle (an IpcBufferCache over
// make_cuda_ipc_opener) or by cuMem POSIX fd and the exporter's (pid, buffer id) (a VmmBufferCache
// over make_cuda_vmm_opener). Opens are counted per buffer: the same buffer opened twice maps once
// (the driver refuses a second open of one IPC handle) and is unmapped by the last release. The
// destructor unmaps everything still open. Without CUDA every open is kUnavailable "no CUDA
// device: ...". Precondition of a release: no queued work still reads the buffer.
class PeerBuffers {
 public:
  PeerBuffers();
  ~PeerBuffers();
  PeerBuffers(PeerBuffers&& other) noexcept;
  PeerBuffers& operator=(PeerBuffers&& other) noexcept;
  PeerBuffers(const PeerBuffers&) = delete;
  PeerBuffers& operator=(const PeerBuffers&) = delete;

  // The local device address of the buffer's start. Errors as IpcBufferCache::open.
  Result<std::uintptr_t> open_ipc(const IpcHandle& handle);
  // `fd` is borrowed (the mapping outlives it). Errors as VmmBufferCache::open.
  Result<std::uintptr_t> open_vmm(const VmmBufferKey& key, int fd, std::size_t bytes);
  // Drops one open of the buffer; unmaps it with the last. Unknown buffers are ignored.
  void release_ipc(const IpcHandle& handle) noexcept;
  void release_vmm(const VmmBufferKey& key) noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::kernels::cuda
