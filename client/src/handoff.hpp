// Sequence hand-off, the adopter's side of the exporter's cache (kvtier.h "handing a sequence to
// another process"; the export/adopt requests themselves are Client members in handoff.cpp).
//
// PeerBuffer owns this process's access to the exporter's one allocation: a read-only shared
// mapping of a host fd (HOST_FD), or one open of a CUDA IPC handle / cuMem VMM fd through the
// client's kernels::cuda::PeerBuffers (which maps each buffer once and counts opens). AdoptedPeer
// adds the exporter's KvLayout over that address; the Client keeps one per adopted sequence until
// its hand-off plan was executed or the sequence closed.
//
// Thread-safety: the owning Client's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "kvtier/kernels/cuda/device.hpp"
#include "kvtier/kernels/executor.hpp"
#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::client {

class PeerBuffer {
 public:
  // Maps `bytes` of the host memory behind `fd` (borrowed) read-only and shared. kProtocol when
  // the file is smaller than `bytes`; kOsError naming the call otherwise.
  static Result<PeerBuffer> map_host(int fd, std::uint64_t bytes);
  // Opens a device buffer through `buffers` (which must outlive the PeerBuffer); kUnavailable
  // with the reason ("no CUDA device: ..." without CUDA).
  static Result<PeerBuffer> open_ipc(kernels::cuda::PeerBuffers& buffers, const kernels::cuda::IpcHandle& handle);
  static Result<PeerBuffer> open_vmm(kernels::cuda::PeerBuffers& buffers, const kernels::cuda::VmmBufferKey& key,
                                     int fd, std::uint64_t bytes);

  PeerBuffer(PeerBuffer&& other) noexcept;
  PeerBuffer& operator=(PeerBuffer&& other) noexcept;
  PeerBuffer(const PeerBuffer&) = delete;
  PeerBuffer& operator=(const PeerBuffer&) = delete;
  ~PeerBuffer();  // unmaps / releases

  std::uintptr_t base() const noexcept { return base_; }
  std::uint64_t bytes() const noexcept { return bytes_; }
  // The executor backend that can read the buffer: kCpu for host memory, kCuda for device memory.
  kernels::Backend backend() const noexcept { return kind_ == Kind::kHost ? kernels::Backend::kCpu : kernels::Backend::kCuda; }

 private:
  enum class Kind : std::uint8_t { kNone, kHost, kIpc, kVmm };
  PeerBuffer() = default;
  void reset() noexcept;

  Kind kind_ = Kind::kNone;
  std::uintptr_t base_ = 0;
  std::uint64_t bytes_ = 0;
  kernels::cuda::PeerBuffers* buffers_ = nullptr;  // kIpc, kVmm; not owned
  kernels::cuda::IpcHandle handle_{};
  kernels::cuda::VmmBufferKey key_{};
};

struct AdoptedPeer {
  PeerBuffer buffer;
  kernels::KvLayout layout;  // the exporter's cache over buffer.base()
};

}  // namespace kvtier::client
