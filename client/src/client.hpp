// Client: the implementation behind the C ABI. One connection to kvtierd, the handshake, the
// control requests, and for engines the mapped control segment (score producer, plan consumer),
// the doorbell and the pool mappings (T1 and, when granted, the int8 pool of T2).
//
// Thread-safety: one thread at a time (single producer / single consumer of the rings).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "connection.hpp"
#include "handoff.hpp"
#include "score_shipper.hpp"
#include "sequence_cache.hpp"
#include "tier_params_wire.hpp"
#include "kvtier/kvtier.h"
#include "kvtier/protocol/control.capnp.h"
#include "kvtier/shm/control_segment.hpp"
#include "kvtier/shm/int8_pool_segment.hpp"
#include "kvtier/shm/mapping.hpp"
#include "kvtier/shm/pool_segment.hpp"

namespace kvtier::client {

struct ClientOptions {
  std::string socket_path;
  std::string name;
  kvtier_role role = KVTIER_ROLE_ENGINE;
  std::chrono::milliseconds reply_timeout{10000};
};

class Client {
 public:
  // Connects and runs the handshake. On a version mismatch the Client is still returned through
  // `out` (versions() names both sides) together with the kVersionMismatch error.
  static Status connect(const ClientOptions& options, std::unique_ptr<Client>& out);

  const kvtier_versions& versions() const { return versions_; }
  Status register_model(const kvtier_model_geometry& geometry);
  Result<std::uint32_t> open_sequence(const kvtier_sequence_options& options);
  Status close_sequence(std::uint32_t sequence);
  Status push_scores(std::uint32_t sequence, std::uint32_t step, std::uint32_t first_position,
                     std::span<const float> values);
  Status push_feature(std::uint32_t sequence, kvtier_feature feature, std::uint32_t first_position,
                      std::span<const float> values);
  // Device-accumulated interval sums and the step that takes them (client_scores.cpp; kvtier.h).
  Status push_score_sums(std::uint32_t sequence, kvtier_score_sum kind, std::uint32_t first_position,
                         std::span<const float> values);
  Result<bool> completes_interval(std::uint32_t sequence) const;
  // Next complete plan; nullopt after `timeout` without one.
  Result<std::optional<kvtier_plan>> poll_plan(std::chrono::milliseconds timeout);
  Status ack_plan(std::uint64_t epoch, bool applied);
  // Waits until kvtierd has consumed every score record and resolved every ack this client
  // published (both ring flags say it is idle); false after `timeout`. Contract in kvtier.h.
  Result<bool> sync(std::chrono::milliseconds timeout);
  Status step_end(std::uint32_t sequence, std::uint32_t step);
  Status attach_cache(std::uint32_t sequence, const kvtier_kv_layout& layout);
  // The sequence's cache, or kBadState when attach_cache was not called for it.
  Result<SequenceCache*> cache(std::uint32_t sequence) const;
  // Executes a polled plan on its sequence's cache. For an adopted sequence the hand-off plan (the
  // one with KVTIER_TPEER moves) copies from the exporter's buffer, which is released after it.
  Status execute_plan(const kvtier_plan& plan, std::span<const std::uint32_t> hbm_slots);

  // Hand-off (handoff.cpp; contract in kvtier.h). export_sequence validates the buffer against
  // the attached cache and the T0 list (kInvalidArgument naming the field; kBadState without an
  // attached cache) and returns kvtierd's token. adopt_sequence adopts a token and opens the
  // exporter's buffer, kept until the hand-off plan ran or the sequence is closed.
  Result<std::uint64_t> export_sequence(std::uint32_t sequence, const kvtier_export_buffer& buffer,
                                        std::span<const std::uint32_t> t0_positions,
                                        std::span<const std::uint32_t> t0_slots);
  Result<kvtier_adopted> adopt_sequence(std::uint64_t token);
  Result<kvtier_daemon_status*> daemon_status();
  // Admin views of protocol 1.5 (daemon_events.cpp): the newest events and a page of a
  // sequence's placement, each one allocation freed by its free_ function below.
  Result<kvtier_daemon_events*> daemon_events(std::uint32_t limit);
  Result<kvtier_sequence_placement*> sequence_placement(std::uint32_t client_id, std::uint32_t sequence_id,
                                                        std::uint32_t first_position, std::uint32_t max_runs);
  kvtier_client_counters counters() const;

  // Pool rows of this client (engine role, after register_model).
  const std::optional<shm::PoolView>& pool() const { return pool_view_; }

 private:
  // What this client knows of one open sequence (reattach.cpp): the options it was opened with,
  // the positions published and, per position, the tier and slot the acknowledged-as-applied
  // plans left it in. After a daemon restart it is the sequence (PROTOCOL.md §4 "Reattachment").
  struct SequenceRecord {
    kvtier_sequence_options options{};
    std::uint32_t length = 0;            // positions published (and the prompt)
    std::vector<std::uint8_t> tiers;     // per position; shorter: T0
    std::vector<std::uint32_t> slots;    // per position, for T1 and T2
    void grow(std::uint32_t end);
    void apply(const kvtier_plan_move& move);
  };
  // A plan poll_plan returned: unacknowledged until ack_plan, then kept until the next poll
  // (its moves are what the returned kvtier_plan points at). Several may be unacknowledged at
  // once, each of another sequence.
  struct Polled {
    std::uint32_t sequence = 0;
    std::uint64_t generation = 0;  // of the rings it came from
    std::vector<kvtier_plan_move> moves;
    bool acked = false;
    bool closed = false;  // its sequence was closed: the daemon rolled it back, nothing to publish
  };
  bool unacknowledged() const;  // a polled plan of the current rings awaits its ack
  explicit Client(Connection connection, ClientOptions options)
      : connection_(std::move(connection)), options_(std::move(options)) {}

  Status hello();
  // Sends `message` (with `fds` on its first byte) and waits for the reply; an ErrorReply
  // becomes its Errc.
  Result<protocol::MessageIn> request(capnp::MessageBuilder& message, std::span<const int> fds = {});
  // Opens the exporter's buffer named by a SequenceAdopted reply (handoff.cpp); layout left empty.
  Result<std::unique_ptr<AdoptedPeer>> open_adopted(std::uint32_t kind, std::uint64_t bytes, std::uint64_t buffer_id,
                                                    std::uint32_t exporter_pid, std::span<const std::byte> ipc_handle,
                                                    int fd);
  Status require_engine(const char* what) const;
  // Reattachment (reattach.cpp). attached(): false from the moment the daemon's end of the
  // socket is found gone until a Reattach succeeds. lost() records that; try_reattach() makes
  // one attempt when the backoff allows (`now`: ignore it), never while a polled plan is
  // unacknowledged or after a refusal.
  bool attached();
  void lost();
  void try_reattach(bool now = false);
  Status reattach();
  void ring_doorbell() const;
  // Starts (or restarts) a sequence's score accumulation (client_scores.cpp).
  void track_scores(std::uint32_t sequence, const ShippingParams& shipping, bool per_step);
  // Splits `values` over records of `per_record` floats, each `floats_per_position` per token.
  Status push_records(shm::ScoreKind kind, std::uint32_t sequence, std::uint32_t step, std::uint32_t first_position,
                      std::span<const float> values, std::uint32_t per_record, std::uint32_t floats_per_position = 1);

  Connection connection_;
  ClientOptions options_;
  kvtier_versions versions_{};
  std::optional<shm::Mapping> control_;
  std::optional<shm::ClientRings> rings_;
  UniqueFd doorbell_;
  std::optional<shm::Mapping> pool_;
  std::optional<shm::PoolView> pool_view_;
  std::optional<shm::Mapping> int8_pool_;  // T2, when the daemon granted int8 slots
  std::optional<shm::Int8PoolView> int8_view_;
  std::map<std::uint32_t, std::unique_ptr<SequenceCache>> caches_;
  std::optional<kvtier_model_geometry> geometry_;  // registered (model_name not kept)
  // Adopted sequences' exporter buffers until their hand-off plan ran; peers_ release into
  // peer_buffers_, so it is declared (and destroyed) after it.
  kernels::cuda::PeerBuffers peer_buffers_;
  std::map<std::uint32_t, std::unique_ptr<AdoptedPeer>> peers_;
  std::map<std::uint32_t, std::uint32_t> digest_dims_;  // sequence -> key digest floats (r_kv)
  std::map<std::uint32_t, SequenceScores> scores_;      // sequence -> scores not shipped yet
  shm::PlanRecord plan_record_{};  // the record poll_plan is reading (1 KiB: not on the stack)
  std::vector<shm::ScoreRecord> batch_;
  kvtier_client_counters counters_{};
  // Reattachment state (reattach.cpp).
  std::map<std::uint32_t, SequenceRecord> records_;
  std::set<std::uint32_t> forgotten_;  // open here, not reattached: pushes dropped, closes local
  UniqueFd pool_fd_, int8_fd_;  // the pools' fds, presented to a successor daemon
  std::string model_name_;
  std::map<std::uint64_t, Polled> polled_;  // by epoch
  bool attached_ = true;
  bool refused_ = false;  // a successor refused the Reattach: no more attempts
  std::string reattach_error_;  // why
  std::uint64_t generation_ = 0;  // rings in use: one more per reattachment
  std::chrono::steady_clock::time_point next_attempt_{};
  std::chrono::milliseconds backoff_{0};
};

// Copies `text` into dst[size], truncated and NUL-terminated.
void copy_text(char* dst, std::size_t size, capnp::Text::Reader text);

// Frees what Client::daemon_status returned (daemon_status.cpp).
void free_daemon_status(kvtier_daemon_status* status);
// Free what Client::daemon_events and Client::sequence_placement returned (daemon_events.cpp).
void free_daemon_events(kvtier_daemon_events* events);
void free_sequence_placement(kvtier_sequence_placement* placement);

}  // namespace kvtier::client
