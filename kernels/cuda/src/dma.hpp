// Copy-engine submission for planned runs (copy_runs.hpp). Private to kvtier_kernels_cuda.
//
// 1D runs go out as one cudaMemcpyBatchAsync where the toolkit has it (CUDA 12.8+; CUDA 13
// dropped its failIdx parameter), so a plan with many runs costs one driver call, falling back to
// one cudaMemcpyAsync per run when the driver does not support batches. Strided runs use
// cudaMemcpy2DAsync, one call each (cudaMemcpyBatchAsync is pointer-to-pointer only).
#pragma once

#include <cuda_runtime.h>

#include <span>

#include "kvtier/kernels/cuda/copy_runs.hpp"
#include "kvtier/base/error.hpp"

namespace kvtier::kernels::cuda {

// Enqueues every copy on `stream` (source read in stream order). Addresses may be device
// addresses or registered host addresses (unified addressing).
Status issue_dma(std::span<const DmaCopy> copies, cudaStream_t stream);
Status issue_dma(std::span<const DmaCopy2d> copies, cudaStream_t stream);

}  // namespace kvtier::kernels::cuda
