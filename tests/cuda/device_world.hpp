// DeviceWorld: one engine KV cache twice, on the device for the CUDA executor and on the host for
// the CPU reference executor, plus two identical T1 pools, all random non-zero bytes. A test runs
// the same operation on both executors and compares every byte.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/kernels/cuda/cuda_executor.hpp"
#include "kvtier/kernels/cuda/device.hpp"
#include "kvtier/kernels/executor.hpp"

namespace kvtier::kernels::cuda::testing {

// Page-aligned, page-granular host memory: cudaHostRegister pins whole pages, so each test pool
// sits on pages of its own.
class PageBuffer {
 public:
  explicit PageBuffer(std::size_t bytes);
  ~PageBuffer();
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

enum class Kind { kHf, kPagedNhd, kPagedHnd, kPoolShaped };

struct Shape {
  Kind kind = Kind::kHf;
  KvDtype dtype = KvDtype::kF16;
  std::uint32_t heads = 4;
  std::uint32_t dim = 64;
  std::uint32_t layers = 3;
  std::uint32_t blocks = 16;
  std::uint32_t block_size = 16;
  std::uint32_t pool_slots = 300;

  std::uint32_t slots() const noexcept { return blocks * block_size; }
};

// "HfF16H4D64": a test-name suffix for a shape.
std::string shape_name(const Shape& shape);

class DeviceWorld {
 public:
  // Builds caches, pools and both executors (the CUDA one with `options`), initialized.
  Status setup(const Shape& shape, std::uint64_t seed, CudaExecutorOptions options = {});

  void expect_caches_equal() const;
  void expect_pools_equal() const;

  Shape shape;
  std::vector<std::vector<std::byte>> host_tensors;
  std::vector<DeviceBuffer> device_tensors;
  KvLayout host_layout;
  KvLayout device_layout;
  std::unique_ptr<PageBuffer> cpu_pool_bytes;
  std::unique_ptr<PageBuffer> gpu_pool_bytes;
  PoolView cpu_pool;
  PoolView gpu_pool;
  std::unique_ptr<CopyExecutor> cpu;
  std::unique_ptr<CudaExecutor> gpu;
};

// A staging buffer over `bytes` at `data` (host or device memory), metadata empty.
inline StagingBuffer staging_at(std::uintptr_t data, std::size_t bytes) {
  StagingBuffer buffer;
  buffer.data = data;
  buffer.capacity_bytes = bytes;
  return buffer;
}

// Runs of consecutive tokens (some crossing blocks) and scattered tokens with distinct slots.
std::vector<RowCopy> mixed_copies(std::uint32_t hbm_slots, std::uint32_t pool_slots,
                                  std::uint64_t seed);

}  // namespace kvtier::kernels::cuda::testing
