// Random test bytes, never zero, so a byte that was not copied shows. No gtest dependency (the
// IPC peer process uses it too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace kvtier::kernels::cuda::testing {

// `bytes` random bytes in [1, 255].
inline std::vector<std::byte> random_bytes(std::size_t bytes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> byte(1, 255);
  std::vector<std::byte> out(bytes);
  for (std::byte& b : out) b = static_cast<std::byte>(byte(rng));
  return out;
}

}  // namespace kvtier::kernels::cuda::testing
