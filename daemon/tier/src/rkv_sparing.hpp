// Internal to r_kv (policy_rkv.cpp): the sparing search of policy.hpp's r_kv definition. Each
// row i looks for its newest near-duplicate j among the horizon (the redundancy_horizon newest
// candidates) and S_ij is taken out of column j. Only the horizon's columns change, so the result
// is one correction per horizon column.
//
// Rows: every candidate when there are at most kSparingSampleRows of them (the definition,
// exactly); otherwise kSparingSampleRows rows drawn uniformly with replacement among the
// candidates (a deterministic hash of seed and step), each standing for n / kSparingSampleRows
// rows. Policy.hpp states the resulting bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvtier/tier/policy.hpp"

namespace kvtier::tier::detail {

inline constexpr std::uint32_t kSparingSampleRows = 2048;

// corrections[k] = Σ over the rows whose newest near-duplicate is horizon[k] of S_i,horizon[k]
// (times the row weight when sampled); horizon holds range indices, newest candidate first.
// Preconditions: ctx.digests.dim > 0; horizon lists the newest candidates of ctx.
std::vector<double> sparing_corrections(const RankingContext& ctx,
                                        std::span<const std::uint32_t> horizon);

}  // namespace kvtier::tier::detail
