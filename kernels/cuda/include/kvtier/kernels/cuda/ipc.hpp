// CUDA IPC for KV buffers shared between processes on one node (sequence hand-off): the owner
// exports a device allocation as IpcHandle bytes (cudaIpcGetMemHandle) and sends them with its
// plan or registration; a peer opens them once through an IpcBufferCache (ipc_cache.hpp) backed
// by make_cuda_ipc_opener(). Legacy CUDA IPC covers cudaMalloc allocations; memory from VMM
// allocators (e.g. PyTorch expandable segments) needs the cuMem POSIX-fd path, not built yet.
//
// Thread-safety: export_device_buffer is thread-safe; an opener belongs to its cache.
#pragma once

#include <cstdint>
#include <memory>

#include "kvtier/kernels/cuda/ipc_cache.hpp"
#include "kvtier/protocol/error.hpp"

namespace kvtier::kernels::cuda {

// The IPC handle of the device allocation that starts at `device_address` (the start of a
// cudaMalloc allocation: a peer maps the whole allocation and gets its start). kUnavailable with
// CUDA's reason on failure.
Result<IpcHandle> export_device_buffer(std::uintptr_t device_address);

// An IpcOpener over cudaIpcOpenMemHandle (lazy peer access) / cudaIpcCloseMemHandle. A failed
// open returns kUnavailable "cudaIpcOpenMemHandle: <reason>" and clears CUDA's error state.
// Opening a handle exported by the same process fails (CUDA allows peers only).
std::unique_ptr<IpcOpener> make_cuda_ipc_opener();

}  // namespace kvtier::kernels::cuda
