// CUDA IPC for KV buffers shared between processes on one node (sequence hand-off): the owner
// exports a device allocation and sends it with its plan or registration; a peer maps it once
// through a cache and may then name it as a copy source. Two paths, by how the memory was made:
//
// - Legacy CUDA IPC, for cudaMalloc allocations: export_device_buffer gives 64 IpcHandle bytes
//   (cudaIpcGetMemHandle) for a message; a peer opens them through an IpcBufferCache
//   (ipc_cache.hpp) over make_cuda_ipc_opener().
// - cuMem POSIX-fd export, for VMM allocations (cuMemCreate: PyTorch expandable segments,
//   VmmBuffer in vmm.hpp), which legacy IPC cannot export: export_vmm_buffer gives a file
//   descriptor plus the allocation's size; the fd travels over a Unix socket (SCM_RIGHTS) and a
//   peer maps it through a VmmBufferCache (vmm_cache.hpp) over make_cuda_vmm_opener(), keyed by
//   the exporter's (pid, buffer id) since fd numbers are no identity. The allocation must have
//   been created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR among its requested handle types.
//
// The driver API calls of the second path are looked up at run time (nothing links libcuda);
// without a driver or device they fail with kUnavailable "no CUDA device: ...".
//
// Thread-safety: the export functions are thread-safe; an opener belongs to its cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kvtier/kernels/cuda/ipc_cache.hpp"
#include "kvtier/kernels/cuda/vmm_cache.hpp"
#include "kvtier/base/error.hpp"
#include "kvtier/base/unique_fd.hpp"

namespace kvtier::kernels::cuda {

// The IPC handle of the device allocation that starts at `device_address` (the start of a
// cudaMalloc allocation: a peer maps the whole allocation and gets its start). kUnavailable with
// CUDA's reason on failure.
Result<IpcHandle> export_device_buffer(std::uintptr_t device_address);

// An IpcOpener over cudaIpcOpenMemHandle (lazy peer access) / cudaIpcCloseMemHandle. A failed
// open returns kUnavailable "cudaIpcOpenMemHandle: <reason>" and clears CUDA's error state.
// Opening a handle exported by the same process fails (CUDA allows peers only).
std::unique_ptr<IpcOpener> make_cuda_ipc_opener();

// A VMM allocation exported as a POSIX fd: send `fd` (SCM_RIGHTS) with `bytes` and the
// VmmBufferKey the exporter chose; the receiver passes both to VmmBufferCache::open.
struct VmmExport {
  UniqueFd fd;            // close-on-exec; closing it does not affect mappings made from it
  std::size_t bytes = 0;  // the allocation's size
};

// Exports the VMM allocation of `bytes` bytes mapped at `device_address` (its start: a peer maps
// the allocation from its first byte; `bytes` is its size, a multiple of the granularity, e.g.
// VmmBuffer::size()). kInvalidArgument for a null address or zero size; kUnavailable naming the
// driver call and CUDA's reason otherwise (cuMemRetainAllocationHandle for memory that is not a
// VMM allocation, cuMemExportToShareableHandle for one not created POSIX-fd exportable), or
// "no CUDA device: ..." without a driver or device.
Result<VmmExport> export_vmm_buffer(std::uintptr_t device_address, std::size_t bytes);

// A VmmOpener over cuMemImportFromShareableHandle + cuMemAddressReserve + cuMemMap +
// cuMemSetAccess (read-write on the current device) / cuMemUnmap + cuMemAddressFree. A failed
// open undoes its steps and returns kUnavailable "<driver call>: <CUDA's error name>: <text>"
// ("vmm opener: fd N is not open" for a closed fd; "no CUDA device: ..." without a device).
std::unique_ptr<VmmOpener> make_cuda_vmm_opener();

}  // namespace kvtier::kernels::cuda
