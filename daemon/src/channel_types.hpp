// The values the data plane and its client channels exchange with the control plane: snapshots
// for status and metrics, placement pages, the pools a client registered. Their own header so that
// ClientChannel (below DataPlane) does not include DataPlane's.
// Thread-safety: plain values.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "handoff.hpp"
#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/shm/int8_pool_geometry.hpp"
#include "kvtier/shm/pool_geometry.hpp"
#include "kvtier/shm/segment.hpp"
#include "kvtier/tier/tier.hpp"
#include "kvtier/tier/tier_params.hpp"
#include "latency_histogram.hpp"

namespace kvtier::daemon {

struct SequenceSnapshot {
  std::uint32_t sequence_id = 0;
  std::uint32_t prompt_length = 0;
  std::uint32_t tokens = 0;
  std::uint32_t tokens_t0 = 0, tokens_t1 = 0, tokens_t2 = 0, tokens_t3 = 0;
  double destroyed_fraction = 0;
  tier::TierParams params;
  HandoffState handoff = HandoffState::kNone;
};

// What one client's plans did, for the metrics (metrics.hpp). Moves are counted when their plan
// is acknowledged as applied, at index direction(from, to).
struct PlanTraffic {
  static constexpr std::size_t direction(tier::Tier from, tier::Tier to) noexcept {
    return static_cast<std::size_t>(from) * tier::kTierCount + static_cast<std::size_t>(to);
  }
  std::array<std::uint64_t, tier::kTierCount * tier::kTierCount> moves{};
  // Bytes the moves wrote in their destination tier: a token's native K and V of every layer
  // into T0 or T1, its share of an int8 block (scales included) into T2, nothing into T3.
  std::array<std::uint64_t, tier::kTierCount * tier::kTierCount> bytes{};
  std::array<std::uint64_t, 3> backpressure_tokens{};  // kept in T0, by shm::BackpressureReason
  LatencyHistogram plan_roundtrip;  // PlanOutbox::roundtrip
  LatencyHistogram decision;        // one sequence's tier decision (SequenceTiers::decide)
};

struct ClientSnapshot {
  std::uint32_t client_id = 0;
  std::uint32_t pool_slots_used = 0;
  std::uint64_t score_records = 0, scores_dropped = 0, plans_sent = 0, plans_acked = 0, errors = 0;
  std::uint64_t plans_failed = 0, moves_sent = 0, backpressure_tokens = 0;
  std::uint64_t ddr_bytes_used = 0, ddr_share_bytes = 0, int8_bytes_used = 0;
  std::uint32_t int8_slots = 0, int8_slots_used = 0;
  std::uint64_t t2_demotions = 0, pressure_demotions = 0, pressure_evictions = 0, int8_trimmed = 0;
  std::uint32_t last_backpressure = 0;  // shm::BackpressureReason
  PlanTraffic traffic;
  std::vector<SequenceSnapshot> sequences;
};

// One run of consecutive positions in one tier (PlacementReply, PROTOCOL.md §4).
struct TierRun {
  tier::Tier tier = tier::Tier::kT0;
  std::uint32_t count = 0;
};

// A page of one sequence's committed placement: runs from first_position on, up to
// next_position (== length when the page reaches the end).
struct PlacementPage {
  std::uint32_t length = 0;
  std::uint32_t first_position = 0;
  std::uint32_t next_position = 0;
  std::vector<TierRun> runs;
};

struct Int8Pool {
  shm::Segment segment;
  shm::Int8PoolGeometry geometry;
};

// A client's host pools, created at RegisterModel.
struct PoolSetup {
  shm::Segment ddr;
  shm::PoolGeometry geometry;
  std::optional<Int8Pool> int8;
  kernels::KvDtype dtype = kernels::KvDtype::kF16;  // of the rows (the int8 tier quantizes them)
  std::uint32_t weight = 1;                         // share of the node DDR budget (NodeBudget)
};

}  // namespace kvtier::daemon
