// The scalar race-key loop and the per-process choice of table (race_keys.hpp).
#include "race_keys.hpp"

namespace kvtier::tier::detail {
namespace {

void scalar_keys(std::uint64_t prefix, std::uint32_t first_position, const float* recent,
                 const float* ranges, CutPoint reserve, float* keys, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const auto index = static_cast<std::uint32_t>(i);
    keys[i] = ranges != nullptr && !reserve.below(score_key(ranges[i]), index)
                  ? std::numeric_limits<float>::infinity()
                  : race_key(prefix, first_position + index, recent[i]);
  }
}

constexpr RaceLoops kScalarLoops{"scalar", &scalar_keys};

}  // namespace

const RaceLoops& scalar_race_loops() noexcept { return kScalarLoops; }

const RaceLoops& default_race_loops() noexcept {
  static const RaceLoops& chosen = []() -> const RaceLoops& {
    if (const RaceLoops* loops = avx512_race_loops()) return *loops;
    if (const RaceLoops* loops = avx2_race_loops()) return *loops;
    return scalar_race_loops();
  }();
  return chosen;
}

}  // namespace kvtier::tier::detail
