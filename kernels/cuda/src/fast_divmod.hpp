// FastDivmod: division of 31-bit unsigned integers by a divisor fixed at launch, as one multiply-
// high and one shift (after CUTLASS's FastDivmod). The copy kernels split flat work indices into
// (copy, layer, K/V, head, word) with four such divisions per 16-byte word; a plain 32-bit
// division costs ~20 instructions, too many when a handful of SMs must keep up with PCIe.
//
// Host and device share the arithmetic, so tests check it on machines without a GPU.
// Private to kvtier_kernels_cuda. Thread-safety: plain value.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KVTIER_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KVTIER_HOST_DEVICE inline
#endif

namespace kvtier::kernels::cuda {

// Dividends must be below kFastDivmodLimit (2^31).
inline constexpr std::uint32_t kFastDivmodLimit = 0x80000000u;

struct FastDivmod {
  std::uint32_t divisor = 1;
  std::uint32_t multiplier = 0;
  std::uint32_t shift = 0;

  FastDivmod() = default;
  // Precondition: 0 < divisor < 2^31.
  explicit FastDivmod(std::uint32_t d) : divisor(d) {
    if (d == 1) return;
    std::uint32_t log2_ceil = 0;
    while ((std::uint64_t{1} << log2_ceil) < d) ++log2_ceil;
    const std::uint32_t p = 31 + log2_ceil;
    multiplier = static_cast<std::uint32_t>(((std::uint64_t{1} << p) + d - 1) / d);
    shift = p - 32;
  }

  KVTIER_HOST_DEVICE std::uint32_t div(std::uint32_t n) const {
    if (divisor == 1) return n;
#if defined(__CUDA_ARCH__)
    return __umulhi(n, multiplier) >> shift;
#else
    return static_cast<std::uint32_t>((std::uint64_t{n} * multiplier) >> 32) >> shift;
#endif
  }

  // quotient, and n - quotient * divisor in `remainder`.
  KVTIER_HOST_DEVICE std::uint32_t divmod(std::uint32_t n, std::uint32_t& remainder) const {
    const std::uint32_t q = div(n);
    remainder = n - q * divisor;
    return q;
  }
};

}  // namespace kvtier::kernels::cuda
