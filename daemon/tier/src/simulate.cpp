// Chain simulation (see simulate.hpp).
#include "kvtier/tier/simulate.hpp"

#include <limits>
#include <random>
#include <vector>

#include "kvtier/base/check.hpp"
#include "kvtier/tier/sequence_tiers.hpp"

namespace kvtier::tier {

Result<ChainSimulation> simulate_chain(const TierParams& params, std::uint32_t prompt,
                                       std::uint32_t generated, std::uint64_t seed) {
  const std::uint64_t total = std::uint64_t{prompt} + generated;
  if (total == 0 || total > 0xFFFFFFFFu) {
    return make_error(Errc::kInvalidArgument, "simulate_chain: prompt + generated out of range");
  }
  auto created = SequenceTiers::create(prompt, params, static_cast<std::uint32_t>(total));
  if (!created) return tl::unexpected(created.error());
  SequenceTiers& seq = *created;

  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> row;
  row.reserve(total);
  auto fill_row = [&](std::uint32_t length) {
    row.resize(length);
    const float scale = 1.0f / static_cast<float>(length);
    for (float& x : row) x = uniform(rng) * scale;
  };

  ChainSimulation sim;
  if (prompt > 0) {
    fill_row(prompt);
    KVTIER_CHECK(seq.add_scores(0, row).has_value(), "simulate: prefill scores refused");
  }
  for (std::uint32_t t = 0; t < generated; ++t) {
    fill_row(prompt + t + 1);
    KVTIER_CHECK(seq.add_scores(0, row).has_value(), "simulate: decode scores refused");
    seq.end_step();
    if (seq.due()) {
      seq.decide();
      seq.commit();
      ++sim.decisions;
    }
  }
  sim.destroyed = seq.destroyed();
  sim.managed = seq.managed();
  sim.t1 = seq.count(Tier::kT1);
  for (std::uint32_t pos = 0; pos < seq.length(); ++pos) {
    if (!seq.is_protected(pos) && seq.tier_of(pos) == Tier::kT0) ++sim.t0_unprotected;
  }
  sim.destroyed_fraction =
      generated == 0 ? 0.0 : static_cast<double>(sim.destroyed) / static_cast<double>(generated);
  return sim;
}

double simulate_destroyed_fraction(EvictionMode mode, double r, double beta, std::uint32_t prompt,
                                   std::uint32_t generated, std::uint64_t seed) {
  TierParams params;
  params.mode = mode;
  params.evict_ratio = r;
  params.hbm_ratio = beta;
  auto sim = simulate_chain(params, prompt, generated, seed);
  return sim ? sim->destroyed_fraction : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace kvtier::tier
