// IpcBufferCache: peer GPU buffers (CUDA IPC handles exported by another process) opened once and
// reused. Opening a handle maps the exporter's whole allocation and costs 0.1 ms to hundreds of
// ms (research/perf-anchors.md §2); the driver also lets one process open a given handle only
// once, so a second open of the same handle fails. Every caller therefore goes through a cache
// keyed by the handle's bytes: the first open() maps, later ones return the same address, and the
// cache closes what it opened when it is destroyed.
//
// The cache logic is CUDA-free; the IpcOpener does the CUDA calls (ipc.hpp: make_cuda_ipc_opener)
// and tests substitute a fake. A failed open is returned to the caller and not remembered, so a
// later call retries (the exporter may not have been ready).
//
// Thread-safety: none; one thread (the client's executor thread) uses a cache.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "kvtier/base/error.hpp"

namespace kvtier::kernels::cuda {

// The bytes of a cudaIpcMemHandle_t (CUDA_IPC_HANDLE_SIZE), as carried in messages.
inline constexpr std::size_t kIpcHandleBytes = 64;
using IpcHandle = std::array<std::byte, kIpcHandleBytes>;

// Maps and unmaps peer buffers. open returns the local device address of the buffer's start.
class IpcOpener {
 public:
  virtual ~IpcOpener() = default;
  virtual Result<std::uintptr_t> open(const IpcHandle& handle) = 0;
  virtual void close(std::uintptr_t address) noexcept = 0;

 protected:
  IpcOpener() = default;
  IpcOpener(const IpcOpener&) = default;
  IpcOpener& operator=(const IpcOpener&) = default;
};

class IpcBufferCache {
 public:
  // Precondition: opener is not null.
  explicit IpcBufferCache(std::unique_ptr<IpcOpener> opener);
  ~IpcBufferCache();  // closes every buffer still open
  IpcBufferCache(const IpcBufferCache&) = delete;
  IpcBufferCache& operator=(const IpcBufferCache&) = delete;

  // The local address of the peer buffer behind `handle`: opened on first use, cached after.
  // A failed open returns the opener's error (kUnavailable from the CUDA opener) and caches
  // nothing.
  Result<std::uintptr_t> open(const IpcHandle& handle);

  // Closes one buffer (its exporter went away). kNotFound when it is not open.
  Status close(const IpcHandle& handle);
  // Closes every buffer.
  void clear() noexcept;

  std::size_t size() const noexcept { return open_.size(); }
  bool contains(const IpcHandle& handle) const { return open_.count(handle) != 0; }
  // Calls made to the opener so far, successful or not.
  std::uint64_t open_calls() const noexcept { return open_calls_; }

 private:
  std::unique_ptr<IpcOpener> opener_;
  std::map<IpcHandle, std::uintptr_t> open_;
  std::uint64_t open_calls_ = 0;
};

}  // namespace kvtier::kernels::cuda
