// DataPlane: the daemon's per-step work, on its own thread. For every engine client it drains
// the score ring (woken by the client's eventfd doorbell after a bounded spin), validates every
// record it copies out, accumulates scores into each sequence's tier state, runs the tier
// engine every Δ steps, publishes differential plans on the plan ring and commits or rolls
// them back when the client acknowledges.
//
// Threading: the control plane calls the public functions from its thread; each posts the work
// to the data-plane io_context, and completions are posted back to the control io_context. No
// state is shared between the two threads otherwise. A client whose ring traffic is malformed
// is reported through the fail handler (on the control thread) and ignored from then on.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <spdlog/logger.h>

#include "kvtier/config/config.hpp"
#include "kvtier/protocol/unique_fd.hpp"
#include "kvtier/shm/control_layout.hpp"
#include "kvtier/kernels/kv_layout.hpp"
#include "kvtier/shm/int8_pool_geometry.hpp"
#include "kvtier/shm/pool_geometry.hpp"
#include "kvtier/shm/segment.hpp"
#include "kvtier/tier/tier.hpp"
#include "kvtier/tier/tier_params.hpp"
#include "event_log.hpp"
#include "handoff.hpp"
#include "latency_histogram.hpp"
#include "node_budget.hpp"
#include "reattach_checks.hpp"

namespace kvtier::daemon {

class ClientChannel;

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

class DataPlane {
 public:
  using FailHandler = std::function<void(std::uint32_t client_id, const Error& error)>;
  using EventHandler = std::function<void(Event event)>;

  DataPlane(asio::io_context& control_io, const config::DaemonConfig& config, spdlog::logger& log);
  ~DataPlane();

  // `on_fail` and `on_event` (each decision worth an event, event_log.hpp) run on the control
  // thread.
  void start(FailHandler on_fail, EventHandler on_event = {});
  void stop();

  void attach(std::uint32_t client_id, shm::Segment control, const shm::ControlLayout& layout, UniqueFd doorbell);
  void set_pool(std::uint32_t client_id, PoolSetup pools);
  // Both complete on the control thread, after the data plane has taken the change into account:
  // a client learns a sequence id only once score records for it are accepted, and a close
  // first drains the ring so records pushed before it still count.
  void open_sequence(std::uint32_t client_id, std::uint32_t sequence_id, std::uint32_t prompt_length,
                     const tier::TierParams& params, std::uint32_t digest_dim, std::function<void()> done);
  void close_sequence(std::uint32_t client_id, std::uint32_t sequence_id, std::function<void()> done);
  // Reattach: the client's pools (adopted from a predecessor, PoolSetup as set_pool takes it)
  // and its sequences as it records them; `done` runs on the control thread with
  // ClientChannel::restore's result.
  void restore(std::uint32_t client_id, PoolSetup pools, std::vector<RestoredSequence> sequences,
               std::function<void(Status)> done);
  // SIGTERM: no channel publishes another plan; acks keep being read until none is outstanding
  // or `timeout` passed. Then every channel keeps its pool names for a successor and `done`
  // runs on the control thread with the number of plans still outstanding.
  void drain(std::chrono::milliseconds timeout, std::function<void(std::size_t outstanding)> done);
  // Destroys the client's channel (unmaps and unlinks its segments), then runs `done` on the
  // control thread.
  void detach(std::uint32_t client_id, std::function<void()> done);
  void snapshot(std::function<void(std::vector<ClientSnapshot>)> done);
  // A page of one sequence's placement (ClientChannel::placement); kNotFound for a client the
  // data plane does not know. `done` runs on the control thread.
  void placement(std::uint32_t client_id, std::uint32_t sequence_id, std::uint32_t first_position,
                 std::uint32_t max_runs, std::function<void(Result<PlacementPage>)> done);

  // Hand-off (handoff.hpp); `done` runs on the control thread. export_sequence freezes the
  // sequence for export (t0: ascending (position, cache slot) pairs).
  void export_sequence(std::uint32_t client_id, std::uint32_t sequence_id,
                       std::vector<std::pair<std::uint32_t, std::uint32_t>> t0, std::function<void(Status)> done);
  // Lends the exported sequence `origin` names to `adopter` as `sequence_id` and queues its
  // hand-off plan; fails, changing nothing, when the adopter lacks room.
  void adopt(HandoffOrigin origin, std::uint32_t adopter, std::uint32_t sequence_id,
             std::function<void(Result<AdoptedSequence>)> done);
  // Has the client's channel read what it published (scores, acks) now, then runs `done` on the
  // control thread, after anything that reading posted there.
  void service_client(std::uint32_t client_id, std::function<void()> done);
  // Runs on the control thread whenever a hand-off plan resolved (applied or not).
  void on_handoff_resolved(std::function<void(const HandoffOrigin&, bool applied)> handler);

 private:
  template <class Fn>
  void post(Fn&& fn);
  void report_failure(std::uint32_t client_id, const Error& error);
  void report_event(Event event);
  // A channel resolved a hand-off it received: tell the exporter's channel and the control plane.
  void handoff_resolved(const HandoffOrigin& origin, std::optional<tier::SequenceTiers> returned);
  // One round of drain(): services every channel, then finishes or re-arms drain_timer_.
  void drain_round(std::chrono::steady_clock::time_point deadline, std::function<void(std::size_t)> done);

  asio::io_context& control_io_;
  const config::DaemonConfig& config_;
  spdlog::logger& log_;
  asio::io_context io_;  // data-plane thread's context
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  FailHandler on_fail_;
  EventHandler on_event_;
  std::function<void(const HandoffOrigin&, bool)> on_handoff_resolved_;
  NodeBudget budget_;  // node-wide DDR accounting; every channel is a member (so declared first)
  std::map<std::uint32_t, std::unique_ptr<ClientChannel>> channels_;
  std::unique_ptr<asio::steady_timer> drain_timer_;  // on io_, while draining
  bool draining_ = false;                             // drain() began: no plans, pools kept
  std::jthread thread_;
};

}  // namespace kvtier::daemon
