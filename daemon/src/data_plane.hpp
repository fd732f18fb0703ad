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
#include "kvtier/base/unique_fd.hpp"
#include "kvtier/shm/control_layout.hpp"
#include "kvtier/shm/segment.hpp"
#include "kvtier/tier/tier_params.hpp"
#include "channel_types.hpp"
#include "event_log.hpp"
#include "node_budget.hpp"
#include "reattach_checks.hpp"

namespace kvtier::daemon {

class ClientChannel;

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
