// PeerCache: the synthetic KV cache of kvtier-handoff-peer (handoff_peer_main.cpp). One sequence,
// one allocation holding K and V of every layer, HF-style per tensor ([kv_heads, slots, head_dim],
// f32): tensor t (= 2 * layer + (V ? 1 : 0)) starts at t * tensor_bytes. Slot s holds position s.
// Element (position, layer, K/V, head, d) has the value kv_value() gives, a hash in [-1, 1], so
// every process can check any row it receives without being told what was written.
//
// Memory: kHostFd (a memfd, exportable as KVTIER_BUFFER_HOST_FD), kHost (plain host memory), or
// kDevice (one cudaMalloc through kernels/cuda/device.hpp, exportable as KVTIER_BUFFER_CUDA_IPC;
// a host mirror is written first and uploaded, and refresh() brings the device bytes back).
//
// Thread-safety: none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvtier/kernels/cuda/device.hpp"
#include "kvtier/kvtier.h"
#include "kvtier/base/error.hpp"

namespace kvtier::workload {

inline constexpr std::uint32_t kPeerLayers = 4, kPeerHeads = 2, kPeerDim = 16;

// The value every process expects at (position, layer, K/V, head, d).
float kv_value(std::uint32_t position, std::uint32_t layer, bool is_v, std::uint32_t head, std::uint32_t d);

class PeerCache {
 public:
  enum class Memory { kHost, kHostFd, kDevice, kDeviceVmm };

  static Result<PeerCache> create(std::uint32_t slots, Memory memory);
  PeerCache(PeerCache&& other) noexcept;
  PeerCache& operator=(PeerCache&& other) = delete;
  PeerCache(const PeerCache&) = delete;
  PeerCache& operator=(const PeerCache&) = delete;
  ~PeerCache();

  std::uint32_t slots() const { return slots_; }
  // For kvtier_sequence_attach_cache (pointer arrays owned by this object).
  kvtier_kv_layout layout() const;
  // For kvtier_sequence_export (kHostFd: HOST_FD with the memfd; kDevice: CUDA_IPC; kDeviceVmm:
  // CUDA_VMM_FD with the allocation's fd).
  kvtier_export_buffer export_buffer() const;

  // Writes position `position`'s generated K and V into `slot` (device: uploaded before return).
  Status write(std::uint32_t slot, std::uint32_t position);
  // Device memory: copies the device bytes over the host mirror (what the library wrote there).
  Status refresh();
  // Elements [0, kPeerDim) of one head of one slot, as last written or refreshed.
  const float* head(std::uint32_t layer, bool is_v, std::uint32_t head, std::uint32_t slot) const;

 private:
  PeerCache() = default;
  std::size_t tensor_bytes() const { return std::size_t{kPeerHeads} * slots_ * kPeerDim * sizeof(float); }
  std::size_t offset(std::uint32_t layer, bool is_v, std::uint32_t head, std::uint32_t slot) const;

  Memory memory_ = Memory::kHost;
  std::uint32_t slots_ = 0;
  std::size_t bytes_ = 0;
  int fd_ = -1;
  bool on_device() const { return memory_ == Memory::kDevice || memory_ == Memory::kDeviceVmm; }

  std::byte* host_ = nullptr;  // the cache (kHost, kHostFd) or its mirror (device memory)
  std::vector<std::byte> owned_;  // kHost and device memory: backs host_
  kernels::cuda::DeviceBuffer device_;         // kDevice
  kernels::cuda::ExportableVmmBuffer vmm_;     // kDeviceVmm
  std::uintptr_t device_base_ = 0;             // either
  std::vector<std::uintptr_t> k_base_, v_base_;
};

}  // namespace kvtier::workload
