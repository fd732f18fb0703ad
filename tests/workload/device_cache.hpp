// DeviceCache: the workload's engine cache in device memory, for --backend cuda. libkvtier's CUDA
// executor offloads from and restores into these buffers and stages T1 rows into a device staging
// buffer, so every byte it moves goes through the CUDA backend; the toy engine still computes on
// the CPU over its own host cache, which this class keeps in step with the device:
//
//   host cache (ToyModel)                         device cache (DeviceCache, same layout)
//   decode writes slot s  ── upload_slot(s) ───▶  every layer and KV head of slot s
//   attention reads T0    ◀── download_all() ──   restores the executor wrote (before each step)
//   audit of a T2 restore ◀── download_slot(s) ─  the row libkvtier dequantized into slot s
//   staged rows (host)    ◀── finish() ────────   device staging buffer (kvtier_stage_prefetch of
//                                                 layer l + 1 while l computes, kvtier_stage_wait)
//
// T2 rows take the same paths: libkvtier's CUDA executor dequantizes them on the GPU straight
// into the device staging buffer (stage) or into the device cache (T2 -> T0 restores).
//
// Correctness over speed: whole layers come down once per step, one small copy per (layer, head,
// K/V) goes up per written token. Uses only kernels/cuda/device.hpp (no CUDA header); without a
// device or a CUDA build, create() fails with kUnavailable "no CUDA device: ...".
//
// Thread-safety: none; the owning ToyEngine's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kvtier/kernels/cuda/device.hpp"
#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/kvtier.hpp"

namespace kvtier::workload {

class DeviceCache {
 public:
  // Device K and V tensors per layer shaped like `host` (a host cache that must outlive this).
  static Result<std::unique_ptr<DeviceCache>> create(const kernels::KvLayout& host);

  // The device cache for kvtier_sequence_attach_cache (backend KVTIER_BACKEND_CUDA).
  kvtier_kv_layout layout() const;

  // Copies slot `slot` (K and V of every layer and KV head) from the host cache to the device and
  // returns once they are there (libkvtier's copy stream may read them next).
  Status upload_slot(std::uint32_t slot);
  // Copies every layer's device K and V over the host cache: the host then holds what the
  // library left on the device (restored T0 rows included).
  Status download_all();
  // Copies slot `slot` (every layer and KV head) from the device over the host cache, e.g. a row
  // a T2 -> T0 restore just dequantized there, for the audit to read right after the plan.
  Status download_slot(std::uint32_t slot);

  // Layer-wise staging (double buffered) into half layer % 2 of the device staging buffer, grown
  // as needed while nothing is in flight. prefetch issues `layer` of `sequence` (`bytes`: what
  // kvtier_sequence_t1_rows asks for; kvtier_stage_prefetch); finish waits for it
  // (kvtier_stage_wait) and copies the staged rows into `host` (resized): `staged` then describes
  // them in host memory. A library failure carries client.last_error().
  Status prefetch(Client& client, std::uint32_t sequence, std::uint32_t layer, kvtier_staging_order order,
                  std::size_t bytes);
  Status finish(Client& client, std::uint32_t sequence, std::uint32_t layer, std::vector<float>& host,
                kvtier_staged_layer& staged);

 private:
  explicit DeviceCache(const kernels::KvLayout& host) : host_(host) {}

  Status copy_head(bool upload, std::uint32_t layer, std::uint32_t slot, std::uint32_t head);

  const kernels::KvLayout& host_;
  std::size_t layer_bytes_ = 0;
  std::vector<kernels::cuda::DeviceBuffer> k_, v_;
  std::vector<std::uintptr_t> k_base_, v_base_;
  kernels::cuda::DeviceBuffer staging_;  // two halves of half_ bytes
  std::size_t half_ = 0;
  unsigned in_flight_ = 0;
};

}  // namespace kvtier::workload
