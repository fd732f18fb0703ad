// The decode stand-in's matmul (decode_kernel.hpp): 64x64 output tiles, 256 threads each computing
// a 4x4 block from 16-deep shared-memory slices. Not tuned; it only has to keep every SM busy
// with arithmetic so that a copy kernel's SMs show up as slowdown.
#include "decode_kernel.hpp"

namespace kvtier::gpu_bench {
namespace {

constexpr int kTile = 64;
constexpr int kDepth = 16;
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    sgemm_kernel(const float* a, const float* b, float* c, int n) {
  __shared__ float a_tile[kDepth][kTile];  // transposed: [k][row]
  __shared__ float b_tile[kDepth][kTile];  // [k][col]
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row0 = blockIdx.y * kTile, col0 = blockIdx.x * kTile;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < n; k0 += kDepth) {
    for (int i = threadIdx.x; i < kTile * kDepth; i += kThreads) {
      a_tile[i % kDepth][i / kDepth] = a[(row0 + i / kDepth) * n + k0 + i % kDepth];
      b_tile[i / kTile][i % kTile] = b[(k0 + i / kTile) * n + col0 + i % kTile];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kDepth; ++k) {
      float x[4], y[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        x[i] = a_tile[k][ty * 4 + i];
        y[i] = b_tile[k][tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += x[i] * y[j];
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) c[(row0 + ty * 4 + i) * n + col0 + tx * 4 + j] = acc[i][j];
  }
}

}  // namespace

cudaError_t launch_sgemm(const float* a, const float* b, float* c, int n, cudaStream_t stream) {
  if (n <= 0 || n % kTile != 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n / kTile), static_cast<unsigned>(n / kTile));
  sgemm_kernel<<<grid, kThreads, 0, stream>>>(a, b, c, n);
  return cudaGetLastError();
}

}  // namespace kvtier::gpu_bench
