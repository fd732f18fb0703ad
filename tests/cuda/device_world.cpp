// DeviceWorld (device_world.hpp).
#include "device_world.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

#include "cuda_test_support.hpp"
#include "kvtier/kernels/executor_factory.hpp"

namespace kvtier::kernels::cuda::testing {

PageBuffer::PageBuffer(std::size_t bytes) {
  constexpr std::size_t kPage = 4096;
  size_ = (bytes + kPage - 1) / kPage * kPage;
  data_ = static_cast<std::byte*>(std::aligned_alloc(kPage, size_));
  if (data_ == nullptr) std::abort();
}

PageBuffer::~PageBuffer() { std::free(data_); }

std::string shape_name(const Shape& s) {
  const char* kinds[] = {"Hf", "PagedNhd", "PagedHnd", "PoolShaped"};
  const char* dtypes[] = {"F16", "Bf16", "F32"};
  return std::string(kinds[static_cast<int>(s.kind)]) + dtypes[static_cast<int>(s.dtype)] + "H" +
         std::to_string(s.heads) + "D" + std::to_string(s.dim);
}

Status DeviceWorld::setup(const Shape& s, std::uint64_t seed, CudaExecutorOptions options) {
  shape = s;
  const std::size_t es = dtype_bytes(s.dtype);
  const std::size_t hb = std::size_t{s.dim} * es;
  const std::size_t row = 2 * s.heads * hb;
  const std::size_t tensor =
      s.kind == Kind::kPoolShaped ? s.slots() * row : std::size_t{s.slots()} * s.heads * hb;
  std::vector<std::uintptr_t> hk, hv, dk, dv;
  const int per_layer = s.kind == Kind::kPoolShaped ? 1 : 2;
  for (std::uint32_t l = 0; l < s.layers; ++l) {
    for (int kv = 0; kv < per_layer; ++kv) {
      host_tensors.push_back(random_bytes(tensor, seed + 2 * l + kv));
      auto device = DeviceBuffer::allocate(tensor);
      if (!device) return tl::unexpected(device.error());
      if (auto u = device->upload(host_tensors.back().data(), tensor); !u) return u;
      const auto h = reinterpret_cast<std::uintptr_t>(host_tensors.back().data());
      const std::uintptr_t d = device->address();
      device_tensors.push_back(std::move(*device));
      if (s.kind == Kind::kPoolShaped) {  // K and V interleaved exactly like pool rows
        hk.push_back(h);
        hv.push_back(h + row / 2);
        dk.push_back(d);
        dv.push_back(d + row / 2);
      } else {
        (kv == 0 ? hk : hv).push_back(h);
        (kv == 0 ? dk : dv).push_back(d);
      }
    }
  }
  const auto make = [&](std::vector<std::uintptr_t> k, std::vector<std::uintptr_t> v) {
    switch (s.kind) {
      case Kind::kPagedNhd:
        return make_paged_layout(s.layers, s.heads, s.dim, s.dtype, s.blocks, s.block_size, k, v);
      case Kind::kPagedHnd:
        return make_paged_hnd_layout(s.layers, s.heads, s.dim, s.dtype, s.blocks, s.block_size, k,
                                     v);
      case Kind::kHf:
      case Kind::kPoolShaped:
        break;
    }
    KvLayout layout = make_hf_layout(s.layers, s.heads, s.dim, s.dtype, s.slots(), k, v);
    if (s.kind == Kind::kPoolShaped) {
      layout.token_stride = row;
      layout.head_stride = hb;
    }
    return layout;
  };
  host_layout = make(hk, hv);
  device_layout = make(dk, dv);
  const std::size_t layer_stride = std::size_t{s.pool_slots} * row + 64;
  const std::vector<std::byte> pool = random_bytes(layer_stride * s.layers, seed + 1000);
  cpu_pool_bytes = std::make_unique<PageBuffer>(pool.size());
  gpu_pool_bytes = std::make_unique<PageBuffer>(pool.size());
  std::memcpy(cpu_pool_bytes->data(), pool.data(), pool.size());
  std::memcpy(gpu_pool_bytes->data(), pool.data(), pool.size());
  cpu_pool = PoolView{cpu_pool_bytes->data(), row, layer_stride, s.pool_slots, s.layers};
  gpu_pool = PoolView{gpu_pool_bytes->data(), row, layer_stride, s.pool_slots, s.layers};
  auto made = make_executor(Backend::kCpu);
  if (!made) return tl::unexpected(made.error());
  cpu = std::move(*made);
  if (auto i = cpu->initialize(host_layout, cpu_pool); !i) return i;
  gpu = std::make_unique<CudaExecutor>(options);
  return gpu->initialize(device_layout, gpu_pool);
}

void DeviceWorld::expect_caches_equal() const {
  for (std::size_t t = 0; t < host_tensors.size(); ++t) {
    std::vector<std::byte> got(host_tensors[t].size());
    ASSERT_TRUE(device_tensors[t].download(got.data(), got.size()));
    EXPECT_TRUE(got == host_tensors[t]) << "device tensor " << t << " differs";
  }
}

void DeviceWorld::expect_pools_equal() const {
  const std::size_t bytes = std::size_t{shape.layers} * cpu_pool.layer_stride;
  EXPECT_EQ(std::memcmp(cpu_pool_bytes->data(), gpu_pool_bytes->data(), bytes), 0)
      << "pools differ";
}

std::vector<RowCopy> mixed_copies(std::uint32_t hbm_slots, std::uint32_t pool_slots,
                                  std::uint64_t seed) {
  std::vector<std::uint32_t> hbm(hbm_slots), pool(pool_slots);
  std::iota(hbm.begin(), hbm.end(), 0u);
  std::iota(pool.begin(), pool.end(), 0u);
  std::mt19937_64 rng(seed);
  std::shuffle(hbm.begin(), hbm.end(), rng);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<RowCopy> copies;
  const std::uint32_t scattered = std::min(hbm_slots, pool_slots) / 3;
  for (std::uint32_t i = 0; i < scattered; ++i) copies.push_back({hbm[i], pool[i]});
  // A run of slots 0..19 on both sides; scattered copies touching those slots are dropped so
  // every source and destination stays distinct.
  std::vector<RowCopy> run;
  for (std::uint32_t i = 0; i < 20 && i < hbm_slots && i < pool_slots; ++i) run.push_back({i, i});
  std::erase_if(copies, [&](const RowCopy& c) { return c.hbm_slot < 20 || c.pool_slot < 20; });
  copies.insert(copies.begin() + static_cast<std::ptrdiff_t>(copies.size() / 2), run.begin(),
                run.end());
  return copies;
}

}  // namespace kvtier::kernels::cuda::testing
