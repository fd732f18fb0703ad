// The decode stand-in's layer for kvtier-gpu-bench: C = A * B, n x n f32 row-major, n a multiple
// of 64 (a tiled shared-memory SGEMM: compute-bound, every SM busy). Plain C++17 and CUDA types
// only, so decode_kernel.cu needs none of the project's C++20 headers.
#pragma once

#include <cuda_runtime.h>

namespace kvtier::gpu_bench {

// Enqueues the product on `stream`; cudaErrorInvalidValue unless n > 0 and n % 64 == 0.
cudaError_t launch_sgemm(const float* a, const float* b, float* c, int n, cudaStream_t stream);

}  // namespace kvtier::gpu_bench
