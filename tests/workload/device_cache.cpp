#include "device_cache.hpp"

#include <algorithm>
#include <string>

namespace kvtier::workload {
namespace {

kvtier_dtype to_c(kernels::KvDtype dtype) {
  switch (dtype) {
    case kernels::KvDtype::kF16: return KVTIER_DTYPE_F16;
    case kernels::KvDtype::kBf16: return KVTIER_DTYPE_BF16;
    case kernels::KvDtype::kF32: return KVTIER_DTYPE_F32;
  }
  return KVTIER_DTYPE_F32;
}

void* host_at(std::uintptr_t base, std::size_t offset) { return reinterpret_cast<void*>(base + offset); }

}  // namespace

Result<std::unique_ptr<DeviceCache>> DeviceCache::create(const kernels::KvLayout& host) {
  if (auto count = kernels::cuda::device_count(); !count) return tl::unexpected(count.error());
  std::unique_ptr<DeviceCache> cache(new DeviceCache(host));
  cache->layer_bytes_ = kernels::layer_extent_bytes(host);
  for (std::uint32_t layer = 0; layer < host.num_layers; ++layer) {
    for (auto* tensors : {&cache->k_, &cache->v_}) {
      auto buffer = kernels::cuda::DeviceBuffer::allocate(cache->layer_bytes_);
      if (!buffer) return tl::unexpected(buffer.error());
      // Defined bytes in slots nobody wrote yet, so a wrong slot shows up as a wrong value.
      if (auto ok = buffer->fill(0xff); !ok) return tl::unexpected(ok.error());
      tensors->push_back(std::move(*buffer));
    }
    cache->k_base_.push_back(cache->k_.back().address());
    cache->v_base_.push_back(cache->v_.back().address());
  }
  if (auto ok = kernels::cuda::device_synchronize(); !ok) return tl::unexpected(ok.error());
  return cache;
}

kvtier_kv_layout DeviceCache::layout() const {
  kvtier_kv_layout layout;
  kvtier_kv_layout_init(&layout);
  layout.num_layers = host_.num_layers;
  layout.num_kv_heads = host_.num_kv_heads;
  layout.head_dim = host_.head_dim;
  layout.dtype = to_c(host_.dtype);
  layout.num_slots = host_.num_slots;
  layout.block_size = host_.block_size;
  layout.token_stride = host_.token_stride;
  layout.head_stride = host_.head_stride;
  layout.block_stride = host_.block_stride;
  layout.k_base = k_base_.data();
  layout.v_base = v_base_.data();
  layout.backend = KVTIER_BACKEND_CUDA;
  return layout;
}

Status DeviceCache::copy_head(bool upload, std::uint32_t layer, std::uint32_t slot, std::uint32_t head) {
  const std::size_t offset = host_.slot_offset(slot) + std::size_t{head} * host_.head_stride;
  const std::size_t bytes = host_.head_bytes();
  if (upload) {
    if (auto ok = k_[layer].upload(host_at(host_.k_base[layer], offset), bytes, offset); !ok) return ok;
    return v_[layer].upload(host_at(host_.v_base[layer], offset), bytes, offset);
  }
  if (auto ok = k_[layer].download(host_at(host_.k_base[layer], offset), bytes, offset); !ok) return ok;
  return v_[layer].download(host_at(host_.v_base[layer], offset), bytes, offset);
}

Status DeviceCache::upload_slot(std::uint32_t slot) {
  for (std::uint32_t layer = 0; layer < host_.num_layers; ++layer) {
    for (std::uint32_t head = 0; head < host_.num_kv_heads; ++head) {
      if (auto ok = copy_head(true, layer, slot, head); !ok) return ok;
    }
  }
  // A copy from pageable memory may return before its DMA lands, and libkvtier's copy stream
  // (non-blocking) is not ordered after ours: wait until the rows are really on the device.
  return kernels::cuda::device_synchronize();
}

Status DeviceCache::download_slot(std::uint32_t slot) {
  // The plan's copies ran on libkvtier's copy stream; execute_plan synchronized it.
  for (std::uint32_t layer = 0; layer < host_.num_layers; ++layer) {
    for (std::uint32_t head = 0; head < host_.num_kv_heads; ++head) {
      if (auto ok = copy_head(false, layer, slot, head); !ok) return ok;
    }
  }
  return {};
}

Status DeviceCache::download_all() {
  for (std::uint32_t layer = 0; layer < host_.num_layers; ++layer) {
    if (auto ok = k_[layer].download(host_at(host_.k_base[layer], 0), layer_bytes_); !ok) return ok;
    if (auto ok = v_[layer].download(host_at(host_.v_base[layer], 0), layer_bytes_); !ok) return ok;
  }
  return {};
}

Status DeviceCache::prefetch(Client& client, std::uint32_t sequence, std::uint32_t layer, kvtier_staging_order order,
                             std::size_t bytes) {
  // The executor needs a non-null buffer even for zero rows; grow geometrically, not per step.
  const std::size_t need = std::max(bytes, host_.row_bytes());
  if (half_ < need) {
    if (in_flight_ != 0) return make_error(Errc::kInternal, "staging grew while a layer was in flight");
    staging_ = {};
    auto buffer = kernels::cuda::DeviceBuffer::allocate(4 * need);
    if (!buffer) return tl::unexpected(buffer.error());
    staging_ = std::move(*buffer);
    half_ = 2 * need;
  }
  // A device address: libkvtier's CUDA executor writes there, this process never dereferences it.
  auto* device = reinterpret_cast<std::byte*>(staging_.address()) + (layer % 2) * half_;
  if (client.stage_prefetch(sequence, layer, order, std::span(device, half_)) != KVTIER_OK) {
    return make_error(Errc::kInternal, client.last_error());
  }
  ++in_flight_;
  return {};
}

Status DeviceCache::finish(Client& client, std::uint32_t sequence, std::uint32_t layer, std::vector<float>& host,
                           kvtier_staged_layer& staged) {
  const kvtier_status status = client.stage_wait(sequence, layer, staged);
  if (in_flight_ != 0) --in_flight_;
  if (status != KVTIER_OK) return make_error(Errc::kInternal, client.last_error());
  // K and V rows lie in the device staging buffer; bring down the span that holds both.
  const std::size_t half = staged.rows * host_.half_row_bytes();
  const std::size_t k_at = reinterpret_cast<std::uintptr_t>(staged.k) - staging_.address();
  const std::size_t v_at = reinterpret_cast<std::uintptr_t>(staged.v) - staging_.address();
  const std::size_t end = std::max(k_at, v_at) + half, begin = std::min(k_at, v_at);
  if (end > staging_.size()) return make_error(Errc::kInternal, "staged rows outside the staging buffer");
  host.resize(std::max<std::size_t>((end - begin + sizeof(float) - 1) / sizeof(float), 1));
  if (auto ok = staging_.download(host.data(), end - begin, begin); !ok) return ok;
  const auto* host_base = reinterpret_cast<const std::byte*>(host.data());
  staged.k = host_base + (k_at - begin);
  staged.v = host_base + (v_at - begin);
  return {};
}

}  // namespace kvtier::workload
