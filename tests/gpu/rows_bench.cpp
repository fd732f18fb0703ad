// gpu_gather_rows_<N>B / gpu_scatter_rows_<N>B, N = 256, 1024, 4096: scattered pool rows in
// mapped pinned host memory moved by the backend's copy kernels on their default grid (at most
// kDefaultCopyBlocks SMs), against one contiguous DMA of the same bytes (goal >= 0.8).
//  - gather: PoolRowGather (prefetch's kernel), random distinct pool rows -> staging in HBM;
//    baseline one cudaMemcpyAsync host -> device.
//  - scatter: KvRowCopy offload (the offload kernel) from a paged NHD cache (bf16, head_dim 64,
//    N / 256 KV heads, so one token is one N-byte row) into random distinct pool rows; baseline
//    one cudaMemcpyAsync device -> host.
// Ratio = kernel GB/s / DMA GB/s.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu_bench.hpp"
#include "kvtier/kernels/cuda/copy_ops.hpp"
#include "kvtier/kernels/cuda/device.hpp"

namespace kvtier::gpu_bench {
namespace {

namespace kc = kernels::cuda;

struct Buffers {
  kc::PinnedBuffer pool;  // pool rows, host
  std::uintptr_t pool_device = 0;
  kc::DeviceBuffer device;  // staging (gather) / K then V cache (scatter)
  kc::DeviceBuffer table;   // StagedRow or RowCopy list
  kc::DeviceBuffer bases;   // scatter: k base, v base
};

// Times `subject` and `baseline` alternately; returns {subject ms, baseline ms} medians.
template <class A, class B>
Result<std::pair<double, double>> time_pair(int repeats, cudaStream_t stream, A&& subject,
                                            B&& baseline) {
  EventTimer timer;
  if (auto s = timer.create(); !s) return tl::unexpected(s.error());
  std::vector<double> a, b;
  for (int r = 0; r < repeats + 2; ++r) {
    auto first = r % 2 == 0 ? timer.time(stream, subject) : timer.time(stream, baseline);
    auto second = r % 2 == 0 ? timer.time(stream, baseline) : timer.time(stream, subject);
    if (!first || !second) return tl::unexpected(first ? second.error() : first.error());
    if (r < 2) continue;  // warm-ups
    (r % 2 == 0 ? a : b).push_back(*first);
    (r % 2 == 0 ? b : a).push_back(*second);
  }
  return std::pair{bench::median(a), bench::median(b)};
}

Status gather(std::size_t row_bytes, std::size_t total, Buffers& buf, cudaStream_t stream,
              int repeats, Reporter& reporter) {
  const std::size_t rows = total / row_bytes;
  const auto pool_rows = static_cast<std::uint32_t>(buf.pool.size() / row_bytes);
  std::vector<std::uint32_t> slots(pool_rows);
  std::iota(slots.begin(), slots.end(), 0u);
  std::shuffle(slots.begin(), slots.end(), std::mt19937_64(row_bytes));
  std::vector<kc::StagedRow> table(rows);
  for (std::size_t i = 0; i < rows; ++i) table[i] = {static_cast<std::uint32_t>(i), slots[i]};
  if (auto s = buf.table.upload(table.data(), rows * sizeof(kc::StagedRow)); !s) return s;
  kc::PoolRowGather op;
  if (auto s = op.initialize(kc::PoolRowGatherArguments{
          buf.pool_device, row_bytes, 0, 0, buf.table.address(), static_cast<std::uint32_t>(rows),
          static_cast<std::uint32_t>(rows), buf.device.address(), 16, kc::kDefaultCopyBlocks});
      !s) {
    return s;
  }
  const auto handle = reinterpret_cast<std::uintptr_t>(stream);
  // Correctness once: staged K halves then V halves of the chosen rows.
  if (auto s = op.run(handle); !s) return s;
  KVTIER_BENCH_CUDA(cudaStreamSynchronize(stream));
  std::vector<std::byte> got(total), want(total);
  if (auto s = buf.device.download(got.data(), total); !s) return s;
  const std::size_t half = row_bytes / 2;
  for (std::size_t i = 0; i < rows; ++i) {
    const std::byte* row = buf.pool.data() + std::size_t{slots[i]} * row_bytes;
    std::memcpy(want.data() + i * half, row, half);
    std::memcpy(want.data() + (rows + i) * half, row + half, half);
  }
  if (got != want) return make_error(Errc::kInternal, "gather kernel result is wrong");
  void* const dst = reinterpret_cast<void*>(buf.device.address());
  auto times = time_pair(
      repeats, stream, [&]() { return op.run(handle); },
      [&]() -> Status {
        KVTIER_BENCH_CUDA(
            cudaMemcpyAsync(dst, buf.pool.data(), total, cudaMemcpyHostToDevice, stream));
        return {};
      });
  if (!times) return tl::unexpected(times.error());
  const double kernel = static_cast<double>(total) / (times->first * 1e6);
  const double dma = static_cast<double>(total) / (times->second * 1e6);
  reporter.report(Measure{"gpu_gather_rows_" + std::to_string(row_bytes) + "B", kernel / dma,
                          Figure{"gather_kernel", kernel, "GB/s"},
                          Figure{"contiguous_h2d", dma, "GB/s"}, ">=0.8"});
  return {};
}

Status scatter(std::size_t row_bytes, std::size_t total, Buffers& buf, cudaStream_t stream,
               int repeats, Reporter& reporter) {
  constexpr std::uint32_t kBlockSize = 16;
  const auto tokens = static_cast<std::uint32_t>(total / row_bytes);
  const std::size_t half = row_bytes / 2;
  const auto pool_rows = static_cast<std::uint32_t>(buf.pool.size() / row_bytes);
  std::vector<std::uint32_t> slots(pool_rows);
  std::iota(slots.begin(), slots.end(), 0u);
  std::shuffle(slots.begin(), slots.end(), std::mt19937_64(row_bytes + 1));
  std::vector<kernels::RowCopy> copies(tokens);
  for (std::uint32_t i = 0; i < tokens; ++i) copies[i] = {i, slots[i]};
  if (auto s = buf.table.upload(copies.data(), tokens * sizeof(kernels::RowCopy)); !s) return s;
  const std::uintptr_t k = buf.device.address(), v = k + std::size_t{tokens} * half;
  const std::uintptr_t bases[2] = {k, v};
  if (auto s = buf.bases.upload(bases, sizeof(bases)); !s) return s;
  kc::KvRowCopyArguments args;
  args.direction = kernels::Direction::kOffload;
  args.k_bases = buf.bases.address();
  args.v_bases = buf.bases.address() + sizeof(std::uintptr_t);
  args.num_kv_heads = static_cast<std::uint32_t>(row_bytes / 256);
  args.num_slots = tokens;
  args.block_size = kBlockSize;
  args.head_bytes = 128;  // head_dim 64, bf16
  args.head_stride = 128;
  args.token_stride = half;
  args.block_stride = half * kBlockSize;
  args.pool = buf.pool_device;
  args.row_bytes = row_bytes;
  args.copies = buf.table.address();
  args.num_copies = tokens;
  args.num_layers = 1;
  args.vector_bytes = 16;
  kc::KvRowCopy op;
  if (auto s = op.initialize(args); !s) return s;
  const auto handle = reinterpret_cast<std::uintptr_t>(stream);
  if (auto s = op.run(handle); !s) return s;  // correctness once
  KVTIER_BENCH_CUDA(cudaStreamSynchronize(stream));
  std::vector<std::byte> cache(total);
  if (auto s = buf.device.download(cache.data(), total); !s) return s;
  for (std::uint32_t i = 0; i < tokens; ++i) {
    const std::byte* row = buf.pool.data() + std::size_t{slots[i]} * row_bytes;
    if (std::memcmp(row, cache.data() + i * half, half) != 0 ||
        std::memcmp(row + half, cache.data() + (tokens + i) * half, half) != 0) {
      return make_error(Errc::kInternal, "scatter kernel result is wrong");
    }
  }
  // The baseline writes a different region of the pool than the rows checked above.
  const void* const src = reinterpret_cast<const void*>(buf.device.address());
  auto times = time_pair(
      repeats, stream, [&]() { return op.run(handle); },
      [&]() -> Status {
        KVTIER_BENCH_CUDA(
            cudaMemcpyAsync(buf.pool.data(), src, total, cudaMemcpyDeviceToHost, stream));
        return {};
      });
  if (!times) return tl::unexpected(times.error());
  const double kernel = static_cast<double>(total) / (times->first * 1e6);
  const double dma = static_cast<double>(total) / (times->second * 1e6);
  reporter.report(Measure{"gpu_scatter_rows_" + std::to_string(row_bytes) + "B", kernel / dma,
                          Figure{"scatter_kernel", kernel, "GB/s"},
                          Figure{"contiguous_d2h", dma, "GB/s"}, ">=0.8"});
  return {};
}

}  // namespace

Status run_rows(const RunConfig& config, Reporter& reporter) {
  const std::size_t total = (config.quick ? std::size_t{16} : std::size_t{64})
                            << 20;  // bytes moved per run
  const int repeats = config.quick ? 5 : 21;
  Buffers buf;
  auto pool = kc::PinnedBuffer::allocate(4 * total);  // rows drawn from 4x the bytes moved
  if (!pool) return tl::unexpected(pool.error());
  buf.pool = std::move(*pool);
  for (std::size_t i = 0; i < buf.pool.size(); ++i) {
    buf.pool.data()[i] = static_cast<std::byte>((i * 2654435761u >> 13) % 255 + 1);
  }
  void* mapped = nullptr;
  KVTIER_BENCH_CUDA(cudaHostGetDevicePointer(&mapped, buf.pool.data(), 0));
  buf.pool_device = reinterpret_cast<std::uintptr_t>(mapped);
  auto device = kc::DeviceBuffer::allocate(total);
  auto table = kc::DeviceBuffer::allocate((total / 256) * 8);
  auto bases = kc::DeviceBuffer::allocate(2 * sizeof(std::uintptr_t));
  if (!device || !table || !bases) return make_error(Errc::kLimitExceeded, "rows: device memory");
  buf.device = std::move(*device);
  buf.table = std::move(*table);
  buf.bases = std::move(*bases);
  auto stream = kc::Stream::create();
  if (!stream) return tl::unexpected(stream.error());
  const auto s = reinterpret_cast<cudaStream_t>(stream->handle());
  reporter.progress("rows", std::to_string(total >> 20) + " MiB per run from a " +
                                std::to_string(buf.pool.size() >> 20) + " MiB pinned pool, " +
                                std::to_string(kc::kDefaultCopyBlocks) + " blocks of " +
                                std::to_string(kc::kCopyThreads) + " threads");
  for (const std::size_t row : {std::size_t{256}, std::size_t{1024}, std::size_t{4096}}) {
    // Random device contents for the scatter source (never zero).
    std::vector<std::byte> fill(total);
    for (std::size_t i = 0; i < total; ++i)
      fill[i] = static_cast<std::byte>((i * 40503u) % 251 + 1);
    if (auto u = buf.device.upload(fill.data(), total); !u) return u;
    if (auto g = gather(row, total, buf, s, repeats, reporter); !g) return g;
    if (auto u = buf.device.upload(fill.data(), total); !u) return u;
    if (auto c = scatter(row, total, buf, s, repeats, reporter); !c) return c;
  }
  return {};
}

}  // namespace kvtier::gpu_bench
