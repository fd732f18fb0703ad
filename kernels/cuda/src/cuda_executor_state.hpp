// CudaExecutor's state and the small helpers its two source files share (cuda_executor.cpp: the
// T1 operations; cuda_executor_int8.cpp: the int8 ones). Private to kvtier_kernels_cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cuda_check.hpp"
#include "executor_resources.hpp"
#include "kvtier/kernels/cuda/cuda_executor.hpp"
#include "kvtier/kernels/cuda/device.hpp"

namespace kvtier::kernels::cuda {

inline cudaStream_t as_stream(std::uintptr_t handle) {
  return reinterpret_cast<cudaStream_t>(handle);
}
inline cudaEvent_t as_event(const Event& event) {
  return reinterpret_cast<cudaEvent_t>(event.handle());
}

inline std::string num(std::size_t value) { return std::to_string(value); }

// Moves a newly made resource into `slot`, or passes on why it could not be made.
template <class T>
Status assign(Result<T> made, T& slot) {
  if (!made) return tl::unexpected(made.error());
  slot = std::move(*made);
  return {};
}

// Makes the copy stream wait for the work queued on the compute stream so far (none: no-op).
inline Status order_after_compute(std::uintptr_t compute, Event& ready, const Stream& copy) {
  if (compute == 0) return {};
  if (auto s = ready.record(compute); !s) return s;
  KVTIER_CUDA_CHECK(cudaStreamWaitEvent(as_stream(copy.handle()), as_event(ready), 0));
  return {};
}

// What bind_int8 holds: the pool, its registration and the int8 operations' tables and scratch.
struct Int8Binding {
  Int8PoolDesc pool;
  HostRegistration registration;
  UploadLane t2_lanes[2];  // prefetch_mixed's T2 row tables, by layer % 2 (T1: stage_lanes)
  UploadLane restore_lane;
  DeviceBuffer restore_scratch;  // restore_int8: every layer's dequantized rows
};

// The destructor drains the copy stream before any member goes, so no registration or buffer is
// released under work still reading it.
struct CudaExecutor::State {
  KvLayout layout;
  PoolView pool;
  HostRegistration registration;
  DeviceBuffer bases;  // k_base[0..L) then v_base[0..L)
  Stream copy;
  Event compute_ready;
  Event copies_done;
  std::vector<Event> layer_ready;
  UploadLane copy_lane;
  UploadLane stage_lanes[2];
  DeviceBuffer staging[2];
  std::size_t staging_bytes = 0;
  std::uint32_t row_copy_vector = 1;
  CopyStats stats;
  std::optional<Int8Binding> int8;  // bind_int8

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() {
    if (copy.handle() != 0) (void)copy.synchronize();
  }
};

}  // namespace kvtier::kernels::cuda
