// decode_slowdown and prefetch_step: a matmul-bound decode stand-in (kLayers SGEMMs of
// kMatrix^3 per step, every SM busy) shaped like DeepSeek-R1-Distill-Qwen-7B's KV (28 layers,
// 4 KV heads x 128 x bf16: 2 KiB pool rows), streaming 17.5 MB of T1 rows per step.
//  - decode_slowdown: one decode step alone vs the same step while PoolRowGather kernels (at most
//    kDefaultCopyBlocks SMs) keep gathering T1 rows on another stream; goal <= 1.05.
//  - prefetch_step: steady-state decode steps through the real CudaExecutor API (pinned pool,
//    copy stream, set_compute_stream, two staging buffers, prefetch(l + 1) before layer l's
//    compute, wait(l) before it) vs the same steps without prefetch; goal <= 1.10.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "decode_kernel.hpp"
#include "gpu_bench.hpp"
#include "kvtier/kernels/cuda/copy_ops.hpp"
#include "kvtier/kernels/cuda/cuda_executor.hpp"
#include "kvtier/kernels/cuda/device.hpp"

namespace kvtier::gpu_bench {
namespace {

namespace kc = kernels::cuda;
using kernels::KvDtype;
using kernels::KvLayout;
using kernels::PoolView;
using kernels::StagingOrder;

constexpr std::uint32_t kLayers = 28;
constexpr std::uint32_t kHeads = 4;
constexpr std::uint32_t kDim = 128;
constexpr std::size_t kRowBytes = 2 * kHeads * kDim * 2;                     // 2 KiB
constexpr std::size_t kStepBytes = 17'500'000;                               // T1 streamed per step
constexpr std::uint32_t kRowsPerLayer = kStepBytes / (kLayers * kRowBytes);  // 305
constexpr std::uint32_t kPoolSlots = 4096;
constexpr int kMatrix = 1024;

struct Decoder {
  kc::DeviceBuffer a, b, c;

  Status create() {
    const std::size_t bytes = std::size_t{kMatrix} * kMatrix * sizeof(float);
    std::vector<float> init(std::size_t{kMatrix} * kMatrix);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> x(-1.0f, 1.0f);
    for (float& v : init) v = x(rng);
    for (kc::DeviceBuffer* m : {&a, &b, &c}) {
      auto made = kc::DeviceBuffer::allocate(bytes);
      if (!made) return tl::unexpected(made.error());
      *m = std::move(*made);
      if (auto s = m->upload(init.data(), bytes); !s) return s;
    }
    return {};
  }

  Status layer(cudaStream_t stream) const {
    KVTIER_BENCH_CUDA(launch_sgemm(reinterpret_cast<const float*>(a.address()),
                                   reinterpret_cast<const float*>(b.address()),
                                   reinterpret_cast<float*>(c.address()), kMatrix, stream));
    return {};
  }
};

// Page-aligned host memory the executor registers itself (as it would an shm pool).
struct HostPool {
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  explicit HostPool(std::size_t n) : bytes((n + 4095) / 4096 * 4096) {
    data = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
    if (data != nullptr) {
      for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::byte>(i % 251 + 1);
    }
  }
  ~HostPool() { std::free(data); }
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;
};

std::vector<std::uint32_t> layer_slots(std::uint32_t layer) {
  std::vector<std::uint32_t> slots(kPoolSlots);
  std::iota(slots.begin(), slots.end(), 0u);
  std::shuffle(slots.begin(), slots.end(), std::mt19937_64(layer + 1));
  slots.resize(kRowsPerLayer);
  return slots;
}

Status decode_slowdown(const RunConfig& config, const Decoder& decoder, HostPool& pool,
                       Reporter& reporter) {
  const int repeats = config.quick ? 5 : 15;
  auto compute = kc::Stream::create();
  auto copy = kc::Stream::create();
  if (!compute || !copy) return make_error(Errc::kUnavailable, "decode_slowdown: streams");
  const auto cs = reinterpret_cast<cudaStream_t>(compute->handle());
  void* mapped = nullptr;
  KVTIER_BENCH_CUDA(cudaHostRegister(pool.data, pool.bytes, cudaHostRegisterMapped));
  struct Unregister {
    void* p;
    ~Unregister() { (void)cudaHostUnregister(p); }
  } unregister{pool.data};
  KVTIER_BENCH_CUDA(cudaHostGetDevicePointer(&mapped, pool.data, 0));
  std::vector<kc::StagedRow> rows;
  const std::vector<std::uint32_t> slots = layer_slots(0);
  for (std::uint32_t i = 0; i < kRowsPerLayer; ++i) rows.push_back({i, slots[i]});
  auto table = kc::DeviceBuffer::allocate(rows.size() * sizeof(kc::StagedRow));
  auto staging = kc::DeviceBuffer::allocate(kRowsPerLayer * kRowBytes);
  if (!table || !staging) return make_error(Errc::kLimitExceeded, "decode_slowdown: memory");
  if (auto s = table->upload(rows.data(), rows.size() * sizeof(kc::StagedRow)); !s) return s;
  kc::PoolRowGather gather;
  if (auto s = gather.initialize(kc::PoolRowGatherArguments{
          reinterpret_cast<std::uintptr_t>(mapped), kRowBytes, 0, 0, table->address(),
          kRowsPerLayer, kRowsPerLayer, staging->address(), 16, kc::kDefaultCopyBlocks});
      !s) {
    return s;
  }
  EventTimer timer;
  if (auto s = timer.create(); !s) return s;
  const auto step = [&]() -> Status {
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      if (auto s = decoder.layer(cs); !s) return s;
    }
    return {};
  };
  std::vector<double> alone, with;
  for (int r = 0; r < repeats + 1; ++r) {
    auto t = timer.time(cs, step);
    if (!t) return tl::unexpected(t.error());
    if (r > 0) alone.push_back(*t);
  }
  // Enough gathers to outlast a step 1.5 times over at 60 GB/s.
  const double step_ms = bench::median(alone);
  const int gathers = std::clamp(
      static_cast<int>(step_ms * 1e-3 * 60e9 * 1.5 / (kRowsPerLayer * kRowBytes)) + 1, 4, 20000);
  for (int r = 0; r < repeats + 1; ++r) {
    for (int g = 0; g < gathers; ++g) {
      if (auto s = gather.run(copy->handle()); !s) return s;
    }
    auto t = timer.time(cs, step);
    if (!t) return tl::unexpected(t.error());
    if (auto s = copy->synchronize(); !s) return s;
    if (r > 0) with.push_back(*t);
  }
  const double with_ms = bench::median(with);
  reporter.progress("decode_slowdown",
                    std::to_string(kLayers) + " SGEMMs of " + std::to_string(kMatrix) +
                        "^3 per step; " + std::to_string(gathers) + " gathers of " +
                        std::to_string(kRowsPerLayer) + " x 2 KiB rows queued beside it");
  reporter.report(Measure{"decode_slowdown", with_ms / step_ms,
                          Figure{"step_with_gather", with_ms, "ms"},
                          Figure{"step_alone", step_ms, "ms"}, "<=1.05"});
  return {};
}

Status prefetch_step(const RunConfig& config, const Decoder& decoder, HostPool& pool,
                     Reporter& reporter) {
  const int steps = config.quick ? 5 : 20;
  const int repeats = config.quick ? 3 : 5;
  // The engine cache is only named (prefetch does not touch it): a small device tensor.
  const std::size_t half = kRowBytes / 2, cache_slots = 16;
  auto cache = kc::DeviceBuffer::allocate(2 * kLayers * cache_slots * half);
  if (!cache) return tl::unexpected(cache.error());
  std::vector<std::uintptr_t> k, v;
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    k.push_back(cache->address() + (2 * l) * cache_slots * half);
    v.push_back(cache->address() + (2 * l + 1) * cache_slots * half);
  }
  const KvLayout layout = make_hf_layout(kLayers, kHeads, kDim, KvDtype::kBf16, cache_slots, k, v);
  const PoolView view{pool.data, kRowBytes, kPoolSlots * kRowBytes, kPoolSlots, kLayers};
  kc::CudaExecutor executor;
  if (auto s = executor.initialize(layout, view); !s) return s;
  auto compute = kc::Stream::create();
  if (!compute) return tl::unexpected(compute.error());
  const auto cs = reinterpret_cast<cudaStream_t>(compute->handle());
  executor.set_compute_stream(compute->handle());
  if (auto s = executor.reserve_staging(kRowsPerLayer); !s) return s;
  std::vector<std::vector<std::uint32_t>> slots;
  for (std::uint32_t l = 0; l < kLayers; ++l) slots.push_back(layer_slots(l));
  const auto prefetch = [&](std::uint32_t layer) -> Status {
    auto buffer = executor.staging_for(layer);
    if (!buffer) return tl::unexpected(buffer.error());
    return executor.prefetch(layer, slots[layer], {}, StagingOrder::kCompact, *buffer);
  };
  const auto without = [&]() -> Status {
    for (int s = 0; s < steps; ++s) {
      for (std::uint32_t l = 0; l < kLayers; ++l) {
        if (auto r = decoder.layer(cs); !r) return r;
      }
    }
    return {};
  };
  const auto with = [&]() -> Status {
    if (auto r = prefetch(0); !r) return r;
    for (int s = 0; s < steps; ++s) {
      for (std::uint32_t l = 0; l < kLayers; ++l) {
        if (auto r = prefetch((l + 1) % kLayers); !r) return r;  // next layer (or next step's 0)
        if (auto r = executor.wait(l); !r) return r;
        if (auto r = decoder.layer(cs); !r) return r;
      }
    }
    return {};
  };
  // Correctness once: layer 5's staged rows are its pool rows, K halves then V halves.
  if (auto r = prefetch(5); !r) return r;
  if (auto r = executor.wait(5); !r) return r;
  if (auto r = compute->synchronize(); !r) return r;
  std::vector<std::byte> got(kRowsPerLayer * kRowBytes);
  if (auto r = kc::copy_to_host(got.data(), executor.staging_for(5)->data, got.size()); !r) {
    return r;
  }
  for (std::uint32_t i = 0; i < kRowsPerLayer; ++i) {
    const std::byte* row = view.row(5, slots[5][i]);
    if (std::memcmp(got.data() + i * half, row, half) != 0 ||
        std::memcmp(got.data() + (kRowsPerLayer + i) * half, row + half, half) != 0) {
      return make_error(Errc::kInternal, "prefetch_step: staged rows are wrong");
    }
  }
  EventTimer timer;
  if (auto r = timer.create(); !r) return r;
  std::vector<double> base_ms, with_ms;
  for (int r = 0; r < repeats + 1; ++r) {
    auto a = timer.time(cs, without);
    auto b = timer.time(cs, with);
    if (!a || !b) return tl::unexpected(a ? b.error() : a.error());
    if (auto s = executor.synchronize(); !s) return s;
    if (r == 0) continue;
    base_ms.push_back(*a / steps);
    with_ms.push_back(*b / steps);
  }
  const double base = bench::median(base_ms), prefetched = bench::median(with_ms);
  reporter.progress("prefetch_step",
                    std::to_string(kLayers) + " layers x " + std::to_string(kRowsPerLayer) +
                        " rows x 2 KiB = " + std::to_string(kLayers * kRowsPerLayer * kRowBytes) +
                        " B of T1 per step, " + std::to_string(steps) + " steps per run");
  reporter.report(Measure{"prefetch_step", prefetched / base,
                          Figure{"step_with_prefetch", prefetched, "ms"},
                          Figure{"step_without", base, "ms"}, "<=1.10"});
  return {};
}

}  // namespace

Status run_decode(const RunConfig& config, Reporter& reporter) {
  Decoder decoder;
  if (auto s = decoder.create(); !s) return s;
  HostPool pool(std::size_t{kLayers} * kPoolSlots * kRowBytes);  // 235 MB
  if (pool.data == nullptr) return make_error(Errc::kLimitExceeded, "decode: host pool");
  if (auto s = decode_slowdown(config, decoder, pool, reporter); !s) return s;
  return prefetch_step(config, decoder, pool, reporter);
}

}  // namespace kvtier::gpu_bench
