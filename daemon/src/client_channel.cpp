#include "client_channel.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "int8_demotion.hpp"

namespace kvtier::daemon {

// limits.plans_in_flight's upper bound (daemon/config/src/fields.cpp) is the ack slots' count.
static_assert(shm::kPlanAckSlots == 64);

ClientChannel::ClientChannel(asio::io_context& io, std::uint32_t client_id, shm::Segment control,
                             const shm::ControlLayout& layout, UniqueFd doorbell,
                             const config::DaemonConfig& config, NodeBudget& budget, spdlog::logger& log,
                             FailFn on_fail, HandoffFn on_handoff, EventFn on_event)
    : client_id_(client_id),
      config_(config),
      log_(log),
      on_fail_(std::move(on_fail)),
      on_handoff_(std::move(on_handoff)),
      on_event_(std::move(on_event)),
      control_(std::move(control)),
      intake_(shm::daemon_rings(control_, layout).scores),  // each part takes its ring's view
      doorbell_(io, doorbell.release()),
      budget_(budget),
      outbox_(shm::daemon_rings(control_, layout).plans, config.limits.plans_in_flight) {
  budget_.join(*this);
  service();
}

ClientChannel::~ClientChannel() {
  budget_.leave(client_id_);
  std::error_code ignored;
  doorbell_.cancel(ignored);
}

void ClientChannel::set_pool(PoolSetup pools) {
  const shm::PoolGeometry& g = pools.geometry;
  pool_ = std::move(pools.ddr);
  pool_view_ = shm::PoolView::trusted(pool_->bytes(), g);
  allocator_.emplace(g.slots);
  bytes_per_slot_ = g.row_bytes() * g.num_layers;
  weight_ = pools.weight;
  if (pools.int8) {
    int8_ = std::move(pools.int8);
    const shm::Int8PoolGeometry& i8 = int8_->geometry;
    int8_view_ = shm::Int8PoolView::trusted(int8_->segment.bytes(), i8);
    int8_allocator_.emplace(i8.blocks, i8.group_tokens);
    int8_geometry_ = kernels::Int8Geometry{g.num_kv_heads, g.head_dim, pools.dtype, i8.group_tokens};
    int8_bytes_per_token_ = i8.block_bytes() * i8.num_layers / i8.group_tokens;
  }
  if (draining_) keep_pool_names();  // arrived while the daemon stops: the successor's
}

void ClientChannel::open_sequence(std::uint32_t sequence_id, std::uint32_t prompt_length,
                                  const tier::TierParams& params, std::uint32_t digest_dim) {
  // Parameters were validated by the session; max_tokens bounds what scores may address.
  auto tiers = tier::SequenceTiers::create(prompt_length, params, config_.limits.max_tokens_per_sequence);
  if (!tiers) return fail(tiers.error());
  sequences_.emplace(sequence_id, Sequence{std::move(*tiers), {}, {}, std::nullopt, digest_dim, HandoffState::kNone, {}});
}

Status ClientChannel::restore(std::vector<RestoredSequence> sequences) {
  std::vector<std::uint32_t> t1, t2;
  for (const RestoredSequence& s : sequences) {
    for (std::uint32_t p = 0; p < s.t1.size(); ++p) {
      if (s.t1.slot_of(p) != tier::kNoSlot) t1.push_back(s.t1.slot_of(p));
    }
    for (std::uint32_t p = 0; p < s.t2.size(); ++p) {
      if (s.t2.slot_of(p) != tier::kNoSlot) t2.push_back(s.t2.slot_of(p));
    }
  }
  if (!allocator_ || (!t2.empty() && !int8_allocator_)) return make_error(Errc::kBadState, "restore before set_pool");
  if (auto ok = allocator_->claim(t1); !ok) return ok;
  if (!t2.empty()) {
    if (auto ok = int8_allocator_->claim(t2); !ok) {
      for (const std::uint32_t slot : t1) (void)allocator_->release(slot);
      return ok;
    }
  }
  for (RestoredSequence& s : sequences) {
    sequences_.emplace(s.sequence_id, Sequence{std::move(s.tiers), std::move(s.t1), std::move(s.t2), std::nullopt,
                                               s.digest_dim, HandoffState::kNone, {}});
  }
  return {};
}

void ClientChannel::keep_pool_names() {
  if (pool_) pool_->release_name();
  if (int8_) int8_->segment.release_name();
}

void ClientChannel::close_sequence(std::uint32_t sequence_id) {
  service();  // records pushed before the close still count
  if (lent_.erase(sequence_id) != 0) return;  // handed off (the Server refuses a close while lent)
  if (dropped_.erase(sequence_id) != 0) return;  // its hand-off failed: nothing left here
  auto it = sequences_.find(sequence_id);
  if (it == sequences_.end()) return;
  if (it->second.handoff == HandoffState::kReceiving) {
    abandon_handoff(sequence_id);  // closed before its hand-off resolved
    service();
    return;
  }
  if (std::optional<PlanOutbox::Plan> plan = outbox_.take(sequence_id)) {
    // The client closed the sequence: it reads none of these rows any more.
    if (auto ok = plan->transaction->rollback(); !ok) return fail(ok.error());
  }
  release_slots(it->second.slots, it->second.t2_slots);
  sequences_.erase(it);
  std::erase(owed_, sequence_id);
  service();  // another sequence may have been waiting for room in the window
}

void ClientChannel::release_slots(const tier::SlotMap& t1, const tier::SlotMap& t2) {
  for (std::uint32_t position = 0; position < t1.size(); ++position) {
    const std::uint32_t slot = t1.slot_of(position);
    if (slot == tier::kNoSlot) continue;
    if (auto ok = allocator_->release(slot); !ok) {  // a daemon bug: the slot map and allocator disagree
      log_.error("event=slot_release_failed client_id={} slot={} {}", client_id_, slot, to_string(ok.error()));
    }
  }
  for (std::uint32_t position = 0; position < t2.size(); ++position) {
    const std::uint32_t slot = t2.slot_of(position);
    if (slot == tier::kNoSlot) continue;
    if (auto ok = int8_allocator_->release(slot); !ok) {
      log_.error("event=int8_slot_release_failed client_id={} slot={} {}", client_id_, slot, to_string(ok.error()));
    }
  }
}

ClientSnapshot ClientChannel::snapshot() const {
  ClientSnapshot out;
  out.client_id = client_id_;
  out.pool_slots_used = allocator_ ? allocator_->used() : 0;
  out.score_records = intake_.records();
  out.scores_dropped = intake_.dropped();
  out.plans_sent = outbox_.plans_sent();
  out.plans_acked = outbox_.plans_acked();
  out.errors = errors_;
  out.plans_failed = outbox_.plans_failed();
  out.moves_sent = outbox_.moves_sent();
  for (std::uint64_t tokens : traffic_.backpressure_tokens) out.backpressure_tokens += tokens;
  out.ddr_bytes_used = ddr_bytes_used();
  if (int8_allocator_) {
    const std::uint32_t group = int8_allocator_->group();
    out.int8_slots = int8_allocator_->capacity_blocks() * group;
    out.int8_slots_used = int8_allocator_->used_blocks() * group;
    out.int8_bytes_used = std::uint64_t{int8_allocator_->used_blocks()} * int8_->geometry.block_bytes() *
                          int8_->geometry.num_layers;
  }
  out.t2_demotions = t2_demotions_;
  out.pressure_demotions = pressure_demotions_;
  out.pressure_evictions = pressure_evictions_;
  out.int8_trimmed = int8_trimmed_;
  out.last_backpressure = static_cast<std::uint32_t>(last_backpressure_);
  out.traffic = traffic_;
  out.traffic.plan_roundtrip = outbox_.roundtrip();
  for (const auto& [id, lent] : lent_) {
    SequenceSnapshot s;  // its tokens are the adopter's now
    s.sequence_id = id;
    s.prompt_length = lent.prompt_length;
    s.handoff = lent.state;
    out.sequences.push_back(s);
  }
  for (const auto& [id, seq] : sequences_) {
    const tier::SequenceTiers& t = seq.tiers;
    SequenceSnapshot s;
    s.sequence_id = id;
    s.handoff = seq.handoff;
    s.prompt_length = t.prompt_length();
    s.tokens = t.length() - t.count(tier::Tier::kT3);
    s.tokens_t0 = t.count(tier::Tier::kT0);
    s.tokens_t1 = t.count(tier::Tier::kT1);
    s.tokens_t2 = t.count(tier::Tier::kT2);
    s.tokens_t3 = t.count(tier::Tier::kT3);
    s.destroyed_fraction = t.destroyed_fraction();
    s.params = t.params();
    out.sequences.push_back(s);
  }
  return out;
}

void ClientChannel::service() {
  if (failed_) return;
  for (;;) {
    if (auto ok = intake_.drain(*this); !ok) return fail(ok.error());
    if (auto ok = resolve_acks(); !ok) return fail(ok.error());
    if (auto ok = decide_owed(); !ok) return fail(ok.error());
    // Sleep only when both rings are idle; announce_sleep re-checks after raising the flag so a
    // push or ack racing with it is never missed (the client then rings the doorbell).
    if (!intake_.announce_sleep()) continue;
    if (!outbox_.announce_sleep()) {
      intake_.cancel_sleep();
      continue;
    }
    break;
  }
  arm_doorbell();
}

void ClientChannel::arm_doorbell() {
  // One wait at a time (every service() ends here): a ring completes every wait on the eventfd at
  // once, and those asio has already completed still run after the channel is destroyed.
  if (doorbell_armed_) return;
  doorbell_armed_ = true;
  doorbell_.async_wait(asio::posix::stream_descriptor::wait_read,
                       [this, alive = std::weak_ptr<const bool>(alive_)](std::error_code ec) {
    // cancel() cannot recall a wait that already completed: check the channel is still here.
    if (ec || alive.expired()) return;
    doorbell_armed_ = false;
    std::uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = ::read(doorbell_.native_handle(), &count, sizeof(count));
    intake_.cancel_sleep();
    outbox_.cancel_sleep();
    service();
  });
}

ScoreIntake::Target ClientChannel::find(std::uint32_t sequence_id) {
  auto it = sequences_.find(sequence_id);
  // Frozen for export, or a failed adoption the client has not closed yet: records are ignored.
  if (it == sequences_.end()) return {.ignored = lent_.contains(sequence_id) || dropped_.contains(sequence_id)};
  Sequence& sequence = it->second;
  if (sequence.handoff == HandoffState::kExported) return {.ignored = true};
  return {&sequence.tiers, &sequence.last_step, sequence.digest_dim, false};
}

Status ClientChannel::step_ended(std::uint32_t sequence_id) {
  Sequence& sequence = sequences_.at(sequence_id);  // find() just returned it
  // A received sequence is decided once its hand-off plan resolves (resolve_handoff).
  if (!sequence.tiers.due() || sequence.handoff == HandoffState::kReceiving || draining_) return {};
  if (!outbox_.can_send(sequence_id)) {  // the window is full, or its own plan is in flight
    if (std::find(owed_.begin(), owed_.end(), sequence_id) == owed_.end()) owed_.push_back(sequence_id);
    return {};
  }
  if (auto sent = decide_and_publish(sequence_id, sequence); !sent) return tl::unexpected(sent.error());
  return {};
}

Result<bool> ClientChannel::decide_and_publish(std::uint32_t sequence_id, Sequence& sequence) {
  const auto started = std::chrono::steady_clock::now();
  const tier::Decision& decision = sequence.tiers.decide();
  traffic_.decision.observe(std::chrono::steady_clock::now() - started);
  if (decision.moves.empty()) {
    sequence.tiers.commit();
    return false;
  }
  return send_pending(sequence_id, sequence, decision.moves, false);
}

Result<bool> ClientChannel::send_pending(std::uint32_t sequence_id, Sequence& sequence,
                                         std::span<const tier::TierMove> moves, bool relief) {
  const auto into_t1 = static_cast<std::uint32_t>(
      std::count_if(moves.begin(), moves.end(), [](const tier::TierMove& m) { return m.to == tier::Tier::kT1; }));
  const Admission admission = budget_.admit(*this, into_t1);
  tier::PoolSlots pools{sequence.slots, *allocator_, &sequence.t2_slots, int8_allocator_ ? &*int8_allocator_ : nullptr,
                        admission.rows};
  auto transaction = tier::PlanTransaction::prepare(moves, pools);
  if (!transaction) return tl::unexpected(transaction.error());
  if (const std::uint32_t kept = transaction->trimmed(); kept != 0) {
    const shm::BackpressureReason reason =
        admission.rows < into_t1 ? admission.limited_by : shm::BackpressureReason::kPoolFull;
    traffic_.backpressure_tokens.at(static_cast<std::size_t>(reason)) += kept;
    last_backpressure_ = reason;
    outbox_.note_backpressure(kept, reason);
    const char* why = reason == shm::BackpressureReason::kNodeBudget ? "node_budget" : "pool_full";
    log_.warn("event=pool_full client_id={} sequence={} kept_in_t0={} reason={}", client_id_, sequence_id, kept, why);
    note(EventKind::kBackpressure, sequence_id, kept, std::string(why) + ": kept in T0");
  }
  if (const std::uint32_t kept = transaction->trimmed_t2(); kept != 0) {
    int8_trimmed_ += kept;
    log_.warn("event=int8_pool_full client_id={} sequence={} kept_in_t1={}", client_id_, sequence_id, kept);
    note(EventKind::kBackpressure, sequence_id, kept, "int8_pool_full: kept in T1");
  }
  if (transaction->planned().empty()) {
    sequence.tiers.commit(transaction->accepted());
    if (auto ok = transaction->commit(sequence.slots, &sequence.t2_slots); !ok) return tl::unexpected(ok.error());
    return false;
  }
  if (!transaction->t2_blocks().empty()) {
    if (auto ok = quantize_t2_blocks(*transaction, *pool_view_, *int8_view_, int8_geometry_); !ok) {
      return tl::unexpected(ok.error());
    }
  }
  // send() takes the transaction only when it published the plan.
  if (!outbox_.send(sequence_id, relief ? PlanKind::kRelief : PlanKind::kDecision, std::move(*transaction))) {
    // Plan ring full: the client is behind. Keep the placement and try again later.
    (void)transaction->rollback();
    sequence.tiers.rollback();
    if (!relief) owed_.push_back(sequence_id);
    return false;
  }
  const PlanOutbox::Plan& plan = *outbox_.in_flight(sequence_id);
  log_.debug("event=plan client_id={} sequence={} epoch={} moves={} step={} relief={}", client_id_, sequence_id,
             plan.epoch, plan.transaction->planned().size(), sequence.tiers.step(), relief);
  return true;
}

Status ClientChannel::resolve_acks() {
  auto resolved = outbox_.poll();
  if (!resolved) return tl::unexpected(resolved.error());
  for (PlanOutbox::Resolved& plan : *resolved) {
    if (auto ok = resolve(std::move(plan)); !ok) return ok;
  }
  return {};
}

Status ClientChannel::resolve(PlanOutbox::Resolved resolved) {
  PlanOutbox::Plan& plan = resolved.plan;
  const bool applied = resolved.applied;
  if (!applied) {
    log_.warn("event=plan_failed client_id={} sequence={} epoch={} rolled_back=1 handoff={}", client_id_,
              plan.sequence, plan.epoch, plan.kind == PlanKind::kHandoff);
    note(EventKind::kPlanFailed, plan.sequence, plan.transaction ? plan.transaction->planned().size() : 0,
         "epoch " + std::to_string(plan.epoch) + " rolled back" + (plan.kind == PlanKind::kHandoff ? " (hand-off)" : ""));
  }
  if (plan.kind == PlanKind::kHandoff) {
    resolve_handoff(plan.sequence, plan.origin, applied);
    return {};
  }
  Sequence& sequence = sequences_.at(plan.sequence);  // a close resolves its own plan first
  tier::PlanTransaction& transaction = *plan.transaction;
  if (applied) {
    count_committed(plan.sequence, plan.epoch, transaction, plan.kind == PlanKind::kRelief);
    if (auto ok = transaction.commit(sequence.slots, &sequence.t2_slots); !ok) return ok;
    sequence.tiers.commit(transaction.accepted());
    return {};
  }
  sequence.tiers.rollback();
  return transaction.rollback();
}

void ClientChannel::count_committed(std::uint32_t sequence_id, std::uint64_t epoch,
                                    const tier::PlanTransaction& transaction, bool relief) {
  std::uint64_t demoted = 0, evicted = 0;
  for (const tier::PlannedMove& move : transaction.planned()) {
    const std::size_t direction = PlanTraffic::direction(move.from, move.to);
    ++traffic_.moves.at(direction);
    traffic_.bytes.at(direction) += move.to == tier::Tier::kT2   ? int8_bytes_per_token_
                                    : move.to == tier::Tier::kT3 ? 0
                                                                 : bytes_per_slot_;
    if (move.to == tier::Tier::kT2) ++(relief ? demoted : t2_demotions_);
    if (move.to == tier::Tier::kT3 && relief) ++evicted;
  }
  pressure_demotions_ += demoted;
  pressure_evictions_ += evicted;
  // One event per relief plan and kind, when the client has applied it.
  const std::string detail = "relief plan epoch " + std::to_string(epoch);
  if (demoted != 0) note(EventKind::kPressureDemotion, sequence_id, demoted, detail);
  if (evicted != 0) note(EventKind::kPressureEviction, sequence_id, evicted, detail);
}

Status ClientChannel::decide_owed() {
  if (draining_) return {};
  // A hand-off first: the adopter is waiting for it, and the exporter's rows are held until then.
  while (!outbox_.full() && !incoming_.empty()) {
    if (!send_handoff()) return {};  // ring full: wait for the client
  }
  // Relief next: another tenant is waiting for these rows.
  while (!outbox_.full() && !relief_.empty()) {
    auto sent = send_relief();
    if (!sent) return tl::unexpected(sent.error());
    if (!*sent) break;  // nothing left that can go now
  }
  // Each owed sequence once per pass; one whose own plan is still in flight waits its turn.
  for (std::size_t turns = owed_.size(); turns > 0 && !outbox_.full() && !owed_.empty(); --turns) {
    const std::uint32_t id = owed_.front();
    owed_.pop_front();
    auto it = sequences_.find(id);
    if (it == sequences_.end()) continue;
    if (outbox_.in_flight(id) != nullptr) {
      owed_.push_back(id);
      continue;
    }
    auto sent = decide_and_publish(id, it->second);
    if (!sent) return tl::unexpected(sent.error());
    if (!*sent && !owed_.empty() && owed_.back() == id) break;  // ring full: wait for the client
  }
  return {};
}

void ClientChannel::fail(const Error& error) {
  if (failed_) return;
  failed_ = true;
  ++errors_;
  log_.warn("event=client_ring_error client_id={} code={} message=\"{}\"", client_id_, errc_name(error.code),
            error.message);
  on_fail_(error);
}

void ClientChannel::note(EventKind kind, std::uint32_t sequence_id, std::uint64_t tokens, std::string detail) {
  if (!on_event_) return;
  Event event;
  event.unix_ms = unix_ms_now();
  event.kind = kind;
  event.client_id = client_id_;
  event.sequence_id = sequence_id;
  event.tokens = tokens;
  event.detail = std::move(detail);
  on_event_(std::move(event));
}

}  // namespace kvtier::daemon
