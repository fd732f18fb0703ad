// h2d_link / d2h_link: one large pinned contiguous cudaMemcpyAsync each way (the copy engine at
// its best), in GB/s against PCIe Gen5 x16's nominal 64 GB/s. These are the ceilings every other
// transfer figure should be read against (perf-anchors §1.2 expects ~55 GB/s on Gen5 hosts).
#include <cstring>
#include <string>
#include <vector>

#include "gpu_bench.hpp"
#include "kvtier/kernels/cuda/device.hpp"

namespace kvtier::gpu_bench {

EventTimer::~EventTimer() {
  if (start_ != nullptr) (void)cudaEventDestroy(start_);
  if (stop_ != nullptr) (void)cudaEventDestroy(stop_);
}

Status EventTimer::create() {
  KVTIER_BENCH_CUDA(cudaEventCreate(&start_));
  KVTIER_BENCH_CUDA(cudaEventCreate(&stop_));
  return {};
}

Status run_links(const RunConfig& config, Reporter& reporter) {
  const std::size_t bytes = (config.quick ? std::size_t{64} : std::size_t{256}) << 20;
  const int repeats = config.quick ? 5 : 15;
  auto host = kernels::cuda::PinnedBuffer::allocate(bytes);
  if (!host) return tl::unexpected(host.error());
  auto device = kernels::cuda::DeviceBuffer::allocate(bytes);
  if (!device) return tl::unexpected(device.error());
  auto owned_stream = kernels::cuda::Stream::create();
  if (!owned_stream) return tl::unexpected(owned_stream.error());
  const auto stream = reinterpret_cast<cudaStream_t>(owned_stream->handle());
  std::memset(host->data(), 0x5A, bytes);  // touch every page outside the timed region
  EventTimer timer;
  if (auto s = timer.create(); !s) return s;

  for (const bool h2d : {true, false}) {
    void* const dev = reinterpret_cast<void*>(device->address());
    const auto copy = [&]() -> Status {
      KVTIER_BENCH_CUDA(cudaMemcpyAsync(h2d ? dev : host->data(), h2d ? host->data() : dev, bytes,
                                        h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                        stream));
      return {};
    };
    std::vector<double> ms;
    for (int r = 0; r < repeats + 2; ++r) {
      auto t = timer.time(stream, copy);
      if (!t) return tl::unexpected(t.error());
      if (r >= 2) ms.push_back(*t);  // two warm-ups
    }
    const double gbps = static_cast<double>(bytes) / (bench::median(ms) * 1e6);
    reporter.progress(h2d ? "h2d_link" : "d2h_link",
                      std::to_string(bytes >> 20) + " MiB, " + std::to_string(repeats) +
                          " repeats; realistic Gen5 ceiling ~55 GB/s (ratio ~0.86)");
    reporter.report(Measure{h2d ? "h2d_link" : "d2h_link", gbps / kGen5X16NominalGBps,
                            Figure{h2d ? "pinned_h2d" : "pinned_d2h", gbps, "GB/s"},
                            Figure{"gen5_x16_nominal", kGen5X16NominalGBps, "GB/s"}, ">=0.8"});
  }
  return {};
}

}  // namespace kvtier::gpu_bench
