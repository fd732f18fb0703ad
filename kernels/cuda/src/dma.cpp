// Copy-engine submission (dma.hpp).
#include "dma.hpp"

#include <vector>

#include "cuda_check.hpp"

namespace kvtier::kernels::cuda {
namespace {

Status issue_one_by_one(std::span<const DmaCopy> copies, cudaStream_t stream) {
  for (const DmaCopy& c : copies) {
    KVTIER_CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<void*>(c.dst),
                                      reinterpret_cast<const void*>(c.src), c.bytes,
                                      cudaMemcpyDefault, stream));
  }
  return {};
}

}  // namespace

Status issue_dma(std::span<const DmaCopy> copies, cudaStream_t stream) {
  if (copies.empty()) return {};
#if CUDART_VERSION >= 12080
  if (copies.size() > 1) {
    std::vector<void*> dsts;
    std::vector<const void*> srcs;
    std::vector<std::size_t> sizes;
    dsts.reserve(copies.size());
    srcs.reserve(copies.size());
    sizes.reserve(copies.size());
    for (const DmaCopy& c : copies) {
      dsts.push_back(reinterpret_cast<void*>(c.dst));
      srcs.push_back(reinterpret_cast<const void*>(c.src));
      sizes.push_back(c.bytes);
    }
    cudaMemcpyAttributes attributes{};
    attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attributes.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    std::size_t first_index = 0;
#if CUDART_VERSION >= 13000
    const cudaError_t status =
        cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), copies.size(), &attributes,
                             &first_index, 1, stream);
#else
    std::size_t fail_index = 0;
    const cudaError_t status =
        cudaMemcpyBatchAsync(dsts.data(), const_cast<void**>(srcs.data()), sizes.data(),
                             copies.size(), &attributes, &first_index, 1, &fail_index, stream);
#endif
    if (status == cudaSuccess) return {};
    if (status != cudaErrorNotSupported) return cuda_error("cudaMemcpyBatchAsync", status);
    (void)cudaGetLastError();  // an older driver: submit the runs one by one instead
  }
#endif
  return issue_one_by_one(copies, stream);
}

Status issue_dma(std::span<const DmaCopy2d> copies, cudaStream_t stream) {
  for (const DmaCopy2d& c : copies) {
    KVTIER_CUDA_CHECK(cudaMemcpy2DAsync(reinterpret_cast<void*>(c.dst), c.dst_pitch,
                                        reinterpret_cast<const void*>(c.src), c.src_pitch, c.width,
                                        c.height, cudaMemcpyDefault, stream));
  }
  return {};
}

}  // namespace kvtier::kernels::cuda
