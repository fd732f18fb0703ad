// Internal: random_draw (policy.hpp) split so a loop over positions hashes (seed, step) once:
// random_draw(seed, step, position) == draw_at(draw_prefix(seed, step), position), bit for bit.
#pragma once

#include <cstdint>

namespace kvtier::tier::detail {

// The splitmix64 finalizer applied to x + 0x9E3779B97F4A7C15.
constexpr std::uint64_t splitmix(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr std::uint64_t draw_prefix(std::uint64_t seed, std::uint64_t step) noexcept {
  return splitmix(splitmix(seed) ^ step);
}

// u in (0, 1): ((h >> 11) + 0.5) / 2^53 with h = splitmix(prefix ^ position).
constexpr double draw_at(std::uint64_t prefix, std::uint32_t position) noexcept {
  const std::uint64_t h = splitmix(prefix ^ position);
  return (static_cast<double>(h >> 11) + 0.5) * 0x1p-53;
}

}  // namespace kvtier::tier::detail
