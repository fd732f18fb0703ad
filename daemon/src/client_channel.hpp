// ClientChannel: the data plane's view of one engine client: its control segment (score and
// plan rings), doorbell, pool slots and open sequences, each with its tier engine state.
//
// The loop, per sequence: score records accumulate into SequenceTiers; a step-end marker (a
// record with count 0) ends a decode step; every Δ steps the engine decides, a PlanTransaction
// reserves destination slots, the differential plan goes out on the plan ring, and when the
// client acknowledges the epoch the placement is committed and source slots are freed (a failed
// epoch rolls back). One plan per client is outstanding at a time; sequences that become due
// meanwhile are decided as soon as it resolves.
//
// Everything read from the rings is copied out and validated before use; a violation returns
// an error and the DataPlane ends the session. Thread-safety: data-plane thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <spdlog/logger.h>

#include "data_plane.hpp"
#include "kvtier/config/config.hpp"
#include "kvtier/shm/control_segment.hpp"
#include "kvtier/shm/segment.hpp"
#include "kvtier/tier/plan_transaction.hpp"
#include "kvtier/tier/sequence_tiers.hpp"
#include "kvtier/tier/slot_allocator.hpp"
#include "kvtier/tier/slot_map.hpp"

namespace kvtier::daemon {

class ClientChannel {
 public:
  using FailFn = std::function<void(const Error&)>;

  ClientChannel(asio::io_context& io, std::uint32_t client_id, shm::Segment control, const shm::ControlLayout& layout,
                shm::UniqueFd doorbell, const config::DaemonConfig& config, spdlog::logger& log, FailFn on_fail);
  ~ClientChannel();

  void set_pool(shm::Segment pool, const shm::PoolGeometry& geometry);
  void open_sequence(std::uint32_t sequence_id, std::uint32_t prompt_length, const tier::TierParams& params,
                     std::uint32_t digest_dim);
  void close_sequence(std::uint32_t sequence_id);
  ClientSnapshot snapshot() const;

  // Drains what the client published (scores, acks) and publishes due plans. Called on a
  // doorbell and before a close.
  void service();

 private:
  struct Sequence {
    tier::SequenceTiers tiers;
    tier::SlotMap slots;
    std::optional<std::uint32_t> last_step;
    std::uint32_t digest_dim = 0;  // key digest width (r_kv), fixed at open
  };
  struct PendingPlan {
    std::uint64_t epoch = 0;
    std::uint32_t sequence = 0;
    tier::PlanTransaction transaction;
  };

  void arm_doorbell();
  Status drain_scores();
  Status ingest(const shm::ScoreRecord& record);
  Status end_step(std::uint32_t sequence_id, Sequence& sequence, std::uint32_t step);
  Status resolve_acks();
  Status resolve(bool applied);
  Status decide_owed();
  // Decides for one sequence and publishes the plan; false when nothing was sent (no moves).
  Result<bool> decide_and_publish(std::uint32_t sequence_id, Sequence& sequence);
  bool publish(std::uint64_t epoch, std::uint32_t sequence_id, std::span<const tier::PlannedMove> moves);
  void release_slots(Sequence& sequence);
  void fail(const Error& error);

  std::uint32_t client_id_;
  const config::DaemonConfig& config_;
  spdlog::logger& log_;
  FailFn on_fail_;
  shm::Segment control_;
  shm::DaemonRings rings_;
  asio::posix::stream_descriptor doorbell_;
  std::optional<shm::Segment> pool_;
  std::optional<tier::SlotAllocator> allocator_;
  std::map<std::uint32_t, Sequence> sequences_;
  std::optional<PendingPlan> pending_;
  std::deque<std::uint32_t> owed_;  // sequences due while a plan was outstanding
  std::uint64_t next_epoch_ = 1;
  std::uint64_t score_records_ = 0, plans_sent_ = 0, plans_acked_ = 0, plans_failed_ = 0;
  std::uint64_t moves_sent_ = 0, trimmed_ = 0, errors_ = 0;
  bool failed_ = false;
};

}  // namespace kvtier::daemon
