// RAII pieces of the CudaExecutor's state. Private to kvtier_kernels_cuda.
//
//  - HostRegistration: one cudaHostRegister (mapped, portable) of a page-rounded host range,
//    undone when its last user goes: executors of one process binding the same range (every
//    sequence of a client binds the client's pools) share one registration, counted. Memory some
//    other owner already registered (or allocated pinned) is used as is and left alone.
//  - UploadLane: a pinned host buffer and a device buffer for small per-operation tables (copy
//    lists, staged-row lists) sent to the device on the copy stream. Before its host side is
//    rewritten, the lane waits for its previous upload to have been read.
//
// Thread-safety: one thread at a time, like the executor; the shared registration count is
// guarded by a mutex.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kvtier/kernels/cuda/device.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::kernels::cuda {

class HostRegistration {
 public:
  // Registers [base, base + bytes) rounded out to pages and finds its device-visible address.
  static Result<HostRegistration> create(const void* base, std::size_t bytes);
  HostRegistration() = default;
  ~HostRegistration();
  HostRegistration(HostRegistration&& other) noexcept;
  HostRegistration& operator=(HostRegistration&& other) noexcept;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;

  // Device-visible address of `base` (the address create was given).
  std::uintptr_t device_address() const noexcept { return device_address_; }
  bool owns_registration() const noexcept { return registered_ != nullptr; }

 private:
  void* registered_ = nullptr;  // page-aligned start we registered, or null
  std::uintptr_t device_address_ = 0;
};

class UploadLane {
 public:
  static Result<UploadLane> create();
  UploadLane() = default;

  // Copies `bytes` from `src` to the lane's device buffer on `stream`, growing both buffers if
  // needed; returns the device address. Stream order makes the data visible to later work.
  Result<std::uintptr_t> upload(const void* src, std::size_t bytes, cudaStream_t stream);

 private:
  PinnedBuffer host_;
  DeviceBuffer device_;
  Event uploaded_;
  bool pending_ = false;
};

}  // namespace kvtier::kernels::cuda
