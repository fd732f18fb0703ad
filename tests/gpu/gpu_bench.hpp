// kvtier-gpu-bench: GPU benchmarks of the CUDA backend, printed in kvtier-bench's format
// (tests/bench/harness.hpp: `ratio <name> <ratio> <subject>=<v><unit> <baseline>=<v><unit>
// goal<goal>`), every ratio against a baseline measured in the same run.
//
// Device timings use CUDA events on the stream doing the work (medians of alternating repeats);
// inputs are random, never zero; each subject is checked for correctness once before timing.
// A benchmark returns an error only when it could not run.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "harness.hpp"
#include "kvtier/base/error.hpp"

#define KVTIER_BENCH_CUDA(call)                                                                  \
  do {                                                                                           \
    if (const cudaError_t bench_status = (call); bench_status != cudaSuccess) {                  \
      return ::kvtier::make_error(::kvtier::Errc::kUnavailable,                                  \
                                  std::string(#call) + ": " + cudaGetErrorString(bench_status)); \
    }                                                                                            \
  } while (0)

namespace kvtier::gpu_bench {

using bench::Figure;
using bench::Measure;
using bench::Reporter;
using bench::RunConfig;

// PCIe Gen5 x16 per direction, nominal (32 GT/s x 16 lanes, 128b/130b): ~63 GB/s,
// rounded to 64 as the denominator of the link ratios (perf-anchors §1.1).
inline constexpr double kGen5X16NominalGBps = 64.0;

// Milliseconds between two events recorded around work enqueued on `stream` by `enqueue`.
class EventTimer {
 public:
  EventTimer() = default;
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  Status create();
  template <class Enqueue>
  Result<double> time(cudaStream_t stream, Enqueue&& enqueue) {
    KVTIER_BENCH_CUDA(cudaEventRecord(start_, stream));
    if (Status s = std::forward<Enqueue>(enqueue)(); !s) return tl::unexpected(s.error());
    KVTIER_BENCH_CUDA(cudaEventRecord(stop_, stream));
    KVTIER_BENCH_CUDA(cudaEventSynchronize(stop_));
    float ms = 0.0f;
    KVTIER_BENCH_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
    return static_cast<double>(ms);
  }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// h2d_link, d2h_link: pinned contiguous copies, GB/s against the Gen5 x16 nominal rate.
Status run_links(const RunConfig& config, Reporter& reporter);
// gpu_gather_rows_<N>B, gpu_scatter_rows_<N>B: copy kernels vs one contiguous DMA.
Status run_rows(const RunConfig& config, Reporter& reporter);
// decode_slowdown, prefetch_step: a matmul-bound decode stand-in with and without prefetch.
Status run_decode(const RunConfig& config, Reporter& reporter);

}  // namespace kvtier::gpu_bench
