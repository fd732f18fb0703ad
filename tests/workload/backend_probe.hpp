// The --backend / --probe contract the test engines (kvtier-workload, kvtier-handoff-peer) share
// with tests/integration's backend_unavailable: without a CUDA device (or a CUDA build) a cuda
// run says "no CUDA device: ..." and exits 4 before touching the daemon; --probe prints the
// backend and exits 0 when it is usable.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "kvtier/kernels/cuda/device.hpp"
#include "kvtier/kvtier.h"

namespace kvtier::workload {

// The exit code to stop with (4: no usable device; 0: --probe answered), or nullopt to go on.
inline std::optional<int> check_backend(const char* program, kvtier_backend backend, bool probe) {
  const bool cuda = backend == KVTIER_BACKEND_CUDA;
  if (cuda) {
    if (const auto count = kernels::cuda::device_count(); !count) {
      std::fprintf(stderr, "%s: %s\n", program, count.error().message.c_str());
      return 4;
    }
  }
  if (!probe) return std::nullopt;
  const auto device = cuda ? kernels::cuda::device_description() : Result<std::string>(std::string("host memory"));
  std::printf("backend %s: %s\n", cuda ? "cuda" : "cpu", device ? device->c_str() : device.error().message.c_str());
  return 0;
}

}  // namespace kvtier::workload
