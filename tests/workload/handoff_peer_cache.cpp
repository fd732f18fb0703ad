#include "handoff_peer_cache.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <utility>

namespace kvtier::workload {

float kv_value(std::uint32_t position, std::uint32_t layer, bool is_v, std::uint32_t head, std::uint32_t d) {
  // splitmix64 of the packed coordinates; 24 bits of it mapped onto [-1, 1].
  std::uint64_t x = (std::uint64_t{position} << 24) ^ (std::uint64_t{layer} << 16) ^
                    (std::uint64_t{is_v ? 1u : 0u} << 15) ^ (std::uint64_t{head} << 8) ^ d;
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) / static_cast<float>(1u << 23) - 1.0f;
}

Result<PeerCache> PeerCache::create(std::uint32_t slots, Memory memory) {
  PeerCache cache;
  cache.memory_ = memory;
  cache.slots_ = slots;
  cache.bytes_ = 2 * std::size_t{kPeerLayers} * cache.tensor_bytes();
  std::uintptr_t base = 0;
  if (memory == Memory::kHostFd) {
    cache.fd_ = ::memfd_create("kvtier-handoff-peer", MFD_CLOEXEC);
    if (cache.fd_ < 0) return os_error("memfd_create");
    if (::ftruncate(cache.fd_, static_cast<off_t>(cache.bytes_)) != 0) return os_error("ftruncate");
    void* mapped = ::mmap(nullptr, cache.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, cache.fd_, 0);
    if (mapped == MAP_FAILED) return os_error("mmap");
    cache.host_ = static_cast<std::byte*>(mapped);
    base = reinterpret_cast<std::uintptr_t>(mapped);
  } else {
    cache.owned_.assign(cache.bytes_, std::byte{0});
    cache.host_ = cache.owned_.data();
    base = reinterpret_cast<std::uintptr_t>(cache.host_);
    if (memory == Memory::kDevice) {
      auto device = kernels::cuda::DeviceBuffer::allocate(cache.bytes_);
      if (!device) return tl::unexpected(device.error());
      cache.device_ = std::move(*device);
      cache.device_base_ = cache.device_.address();
    } else if (memory == Memory::kDeviceVmm) {
      auto vmm = kernels::cuda::ExportableVmmBuffer::allocate(cache.bytes_);
      if (!vmm) return tl::unexpected(vmm.error());
      cache.vmm_ = std::move(*vmm);
      cache.device_base_ = cache.vmm_.address();
    }
    if (cache.on_device()) {
      if (auto ok = kernels::cuda::copy_to_device(cache.device_base_, cache.host_, cache.bytes_); !ok) {
        return tl::unexpected(ok.error());
      }
      base = cache.device_base_;
    }
  }
  for (std::uint32_t l = 0; l < kPeerLayers; ++l) {
    cache.k_base_.push_back(base + cache.offset(l, false, 0, 0));
    cache.v_base_.push_back(base + cache.offset(l, true, 0, 0));
  }
  return cache;
}

PeerCache::PeerCache(PeerCache&& other) noexcept
    : memory_(other.memory_),
      slots_(other.slots_),
      bytes_(other.bytes_),
      fd_(std::exchange(other.fd_, -1)),
      host_(std::exchange(other.host_, nullptr)),
      owned_(std::move(other.owned_)),
      device_(std::move(other.device_)),
      vmm_(std::move(other.vmm_)),
      device_base_(std::exchange(other.device_base_, 0)),
      k_base_(std::move(other.k_base_)),
      v_base_(std::move(other.v_base_)) {}

PeerCache::~PeerCache() {
  if (memory_ == Memory::kHostFd && host_ != nullptr) ::munmap(host_, bytes_);
  if (fd_ >= 0) ::close(fd_);
}

std::size_t PeerCache::offset(std::uint32_t layer, bool is_v, std::uint32_t head, std::uint32_t slot) const {
  return (2 * std::size_t{layer} + (is_v ? 1 : 0)) * tensor_bytes() +
         (std::size_t{head} * slots_ + slot) * kPeerDim * sizeof(float);
}

kvtier_kv_layout PeerCache::layout() const {
  kvtier_kv_layout layout;
  kvtier_kv_layout_init(&layout);
  layout.num_layers = kPeerLayers;
  layout.num_kv_heads = kPeerHeads;
  layout.head_dim = kPeerDim;
  layout.dtype = KVTIER_DTYPE_F32;
  layout.num_slots = slots_;
  layout.block_size = slots_;
  layout.token_stride = kPeerDim * sizeof(float);
  layout.head_stride = std::size_t{slots_} * kPeerDim * sizeof(float);
  layout.block_stride = tensor_bytes();
  layout.k_base = k_base_.data();
  layout.v_base = v_base_.data();
  layout.backend = on_device() ? KVTIER_BACKEND_CUDA : KVTIER_BACKEND_CPU;
  return layout;
}

kvtier_export_buffer PeerCache::export_buffer() const {
  kvtier_export_buffer buffer;
  kvtier_export_buffer_init(&buffer);
  buffer.kind = memory_ == Memory::kDevice      ? KVTIER_BUFFER_CUDA_IPC
                : memory_ == Memory::kDeviceVmm ? KVTIER_BUFFER_CUDA_VMM_FD
                                                : KVTIER_BUFFER_HOST_FD;
  buffer.fd = memory_ == Memory::kDeviceVmm ? vmm_.fd() : fd_;
  buffer.base = on_device() ? device_base_ : reinterpret_cast<std::uintptr_t>(host_);
  buffer.bytes = memory_ == Memory::kDeviceVmm ? vmm_.size() : bytes_;  // the whole allocation
  buffer.buffer_id = 1;
  return buffer;
}

Status PeerCache::write(std::uint32_t slot, std::uint32_t position) {
  for (std::uint32_t l = 0; l < kPeerLayers; ++l) {
    for (const bool is_v : {false, true}) {
      for (std::uint32_t h = 0; h < kPeerHeads; ++h) {
        const std::size_t at = offset(l, is_v, h, slot);
        float values[kPeerDim];
        for (std::uint32_t d = 0; d < kPeerDim; ++d) values[d] = kv_value(position, l, is_v, h, d);
        std::memcpy(host_ + at, values, sizeof(values));
        if (on_device()) {
          if (auto ok = kernels::cuda::copy_to_device(device_base_ + at, values, sizeof(values)); !ok) return ok;
        }
      }
    }
  }
  return {};
}

Status PeerCache::refresh() {
  if (!on_device()) return {};
  return kernels::cuda::copy_to_host(host_, device_base_, bytes_);
}

const float* PeerCache::head(std::uint32_t layer, bool is_v, std::uint32_t head, std::uint32_t slot) const {
  return reinterpret_cast<const float*>(host_ + offset(layer, is_v, head, slot));
}

}  // namespace kvtier::workload
