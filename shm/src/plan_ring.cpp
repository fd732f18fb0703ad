#include "kvtier/shm/plan_ring.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "kvtier/base/check.hpp"
#include "ring_common.hpp"

#include "futex.hpp"

namespace kvtier::shm {
namespace {

PlanRingHeader* ring_header(std::span<std::byte> ring, std::uint32_t capacity) noexcept {
  KVTIER_CHECK(is_valid_ring_capacity(capacity), "plan ring capacity not a valid power of two");
  KVTIER_CHECK(ring.size() >= plan_ring_bytes(capacity),
               "plan ring span smaller than its capacity");
  KVTIER_CHECK(reinterpret_cast<std::uintptr_t>(ring.data()) % kCacheLine == 0,
               "plan ring not cache-line aligned");
  return reinterpret_cast<PlanRingHeader*>(ring.data());
}

PlanRecord* ring_slots(std::span<std::byte> ring) noexcept {
  return reinterpret_cast<PlanRecord*>(ring.data() + sizeof(PlanRingHeader));
}

// Dekker partner of PlanProducer::announce_sleep: after the seq_cst ack store, a seq_cst look at
// the flag; claim the wake-up (1 -> 0) so the doorbell rings once per announced sleep.
bool claim_wake(std::atomic<std::uint32_t>& waiting) noexcept {
  if (waiting.load(std::memory_order_seq_cst) == 0) return false;
  std::uint32_t expected = 1;
  return waiting.compare_exchange_strong(expected, 0, std::memory_order_relaxed);
}

}  // namespace

// --- PlanProducer (daemon) ---------------------------------------------------------------------

PlanProducer::PlanProducer(std::span<std::byte> ring, std::uint32_t capacity) noexcept
    : header_(ring_header(ring, capacity)),
      slots_(ring_slots(ring)),
      capacity_(capacity),
      mask_(capacity - 1u),
      write_(header_->producer.write.load(std::memory_order_relaxed)),
      read_cache_(header_->consumer.read.load(std::memory_order_acquire)),
      ack_read_(header_->producer.ack_read.load(std::memory_order_relaxed)),
      last_ack_write_(ack_read_) {
  // Adoption: every epoch that reached the ring counts as published, so the next one is new.
  if (write_ != 0) published_epoch_ = slots_[(write_ - 1) & mask_].epoch;
}

bool PlanProducer::push(const PlanRecord& record) noexcept {
  KVTIER_CHECK(record.move_count <= kMovesPerRecord,
               "plan record move_count beyond kMovesPerRecord");
  KVTIER_CHECK(record.epoch >= 1, "plan record epoch 0");
  KVTIER_CHECK(open_epoch_ == 0 ? record.epoch > published_epoch_ : record.epoch == open_epoch_,
               "plan record epoch neither new nor the open one");
  if (write_ - read_cache_ >= capacity_) {
    read_cache_ = header_->consumer.read.load(std::memory_order_acquire);
    if (write_ - read_cache_ >= capacity_) return false;
  }
  std::memcpy(&slots_[write_ & mask_], &record, sizeof(PlanRecord));
  // Dekker with PlanConsumer::wait: seq_cst publish, then seq_cst look at the flag.
  header_->producer.write.store(++write_, std::memory_order_seq_cst);
  if ((record.flags & kPlanLast) != 0) {
    published_epoch_ = record.epoch;
    open_epoch_ = 0;
  } else {
    open_epoch_ = record.epoch;
  }
  if (header_->consumer.consumer_waiting.load(std::memory_order_seq_cst) != 0) {
    header_->producer.wake.fetch_add(1, std::memory_order_release);
    detail::futex_wake_all(header_->producer.wake);
  }
  return true;
}

Result<std::size_t> PlanProducer::pop_acks(std::span<PlanAck> out) {
  const std::uint64_t write = header_->consumer.ack_write.load(std::memory_order_acquire);
  if (auto ok = detail::check_write_counter("plan ack", write, last_ack_write_, ack_read_, kPlanAckSlots); !ok) {
    return tl::unexpected(ok.error());
  }
  last_ack_write_ = write;
  const auto count = static_cast<std::size_t>(std::min<std::uint64_t>(write - ack_read_, out.size()));
  for (std::size_t i = 0; i < count; ++i) {
    // Copy, then look only at the copy: the client may still scribble on the slot.
    std::memcpy(&out[i], &header_->acks[(ack_read_ + i) & (kPlanAckSlots - 1u)], sizeof(PlanAck));
    const PlanAck& ack = out[i];
    const std::string which = "plan ack " + std::to_string(ack_read_ + i);
    if (ack.outcome != static_cast<std::uint32_t>(PlanOutcome::kApplied) &&
        ack.outcome != static_cast<std::uint32_t>(PlanOutcome::kFailed)) {
      return make_error(Errc::kProtocol, which + " has outcome " + std::to_string(ack.outcome) +
                                             " (1 applied, 2 failed)");
    }
    if (ack.epoch == 0 || ack.epoch > published_epoch_) {
      return make_error(Errc::kProtocol, which + " names epoch " + std::to_string(ack.epoch) +
                                             ", never published (last published " +
                                             std::to_string(published_epoch_) + ")");
    }
  }
  ack_read_ += count;
  header_->producer.ack_read.store(ack_read_, std::memory_order_release);
  return count;
}

bool PlanProducer::announce_sleep() noexcept {
  header_->producer.producer_waiting.store(1, std::memory_order_seq_cst);
  if (header_->consumer.ack_write.load(std::memory_order_seq_cst) != ack_read_) {
    cancel_sleep();
    return false;
  }
  return true;
}

void PlanProducer::cancel_sleep() noexcept {
  header_->producer.producer_waiting.store(0, std::memory_order_relaxed);
}

std::uint64_t PlanProducer::free_slots() noexcept {
  read_cache_ = header_->consumer.read.load(std::memory_order_acquire);
  return detail::free_slots(write_, read_cache_, capacity_);
}

void PlanProducer::note_backpressure(std::uint64_t tokens, BackpressureReason reason) noexcept {
  header_->producer.backpressure_reason.store(static_cast<std::uint32_t>(reason), std::memory_order_relaxed);
  header_->producer.backpressure_tokens.fetch_add(tokens, std::memory_order_relaxed);
}

// --- PlanConsumer (client) ---------------------------------------------------------------------

PlanConsumer::PlanConsumer(std::span<std::byte> ring, std::uint32_t capacity) noexcept
    : header_(ring_header(ring, capacity)),
      slots_(ring_slots(ring)),
      capacity_(capacity),
      read_(header_->consumer.read.load(std::memory_order_relaxed)),
      last_write_(read_),
      ack_write_(header_->consumer.ack_write.load(std::memory_order_relaxed)),
      ack_read_cache_(header_->producer.ack_read.load(std::memory_order_acquire)) {}

Result<std::size_t> PlanConsumer::pop(std::span<PlanRecord> out) {
  return detail::pop_records("plan", header_, slots_, capacity_, read_, last_write_, out,
                             [](const PlanRecord& record, std::uint64_t index) -> Status {
                               if (record.move_count <= kMovesPerRecord) return {};
                               return make_error(Errc::kProtocol, "plan record " + std::to_string(index) +
                                                                      " has move_count " + std::to_string(record.move_count) +
                                                                      " > " + std::to_string(kMovesPerRecord));
                             });
}

bool PlanConsumer::pending() const noexcept {
  return header_->producer.write.load(std::memory_order_acquire) != read_;
}

bool PlanConsumer::wait(std::chrono::nanoseconds timeout) noexcept {
  if (pending()) return true;
  int budget = spin_budget_;
  if (budget < kPlanSpinIterations && ++waits_since_probe_ >= kPlanSpinProbeInterval) {
    waits_since_probe_ = 0;
    budget = kPlanSpinIterations;
  }
  for (int i = 0; i < budget; ++i) {
    detail::cpu_relax();
    if (pending()) {
      spin_budget_ = kPlanSpinIterations;
      return true;
    }
  }
  spin_budget_ = std::max(kPlanMinSpinIterations, spin_budget_ / 2);
  using Clock = std::chrono::steady_clock;
  constexpr auto kMaxTimeout = std::chrono::hours(24 * 365);  // keeps now() + timeout finite
  const auto deadline = Clock::now() + std::min<std::chrono::nanoseconds>(timeout, kMaxTimeout);
  auto& waiting = header_->consumer.consumer_waiting;
  auto& wake = header_->producer.wake;
  for (;;) {
    // Dekker with PlanProducer::push: seq_cst flag store, then seq_cst re-check. `seen` is read
    // before the re-check, so a bump that follows it makes FUTEX_WAIT return at once.
    waiting.store(1, std::memory_order_seq_cst);
    const std::uint32_t seen = wake.load(std::memory_order_seq_cst);
    if (header_->producer.write.load(std::memory_order_seq_cst) != read_) break;
    const auto remaining = deadline - Clock::now();
    if (remaining <= Clock::duration::zero()) {
      waiting.store(0, std::memory_order_relaxed);
      return false;
    }
    detail::futex_wait(wake, seen, std::chrono::duration_cast<std::chrono::nanoseconds>(remaining));
  }
  waiting.store(0, std::memory_order_relaxed);
  return true;
}

AckResult PlanConsumer::ack(std::uint64_t epoch) noexcept { return push_ack(epoch, PlanOutcome::kApplied); }

AckResult PlanConsumer::fail(std::uint64_t epoch) noexcept { return push_ack(epoch, PlanOutcome::kFailed); }

AckResult PlanConsumer::push_ack(std::uint64_t epoch, PlanOutcome outcome) noexcept {
  if (ack_write_ - ack_read_cache_ >= kPlanAckSlots) {
    ack_read_cache_ = header_->producer.ack_read.load(std::memory_order_acquire);
    if (ack_write_ - ack_read_cache_ >= kPlanAckSlots) return AckResult::kFull;
  }
  const PlanAck record{epoch, static_cast<std::uint32_t>(outcome), 0};
  std::memcpy(&header_->acks[ack_write_ & (kPlanAckSlots - 1u)], &record, sizeof(PlanAck));
  // Dekker with PlanProducer::announce_sleep: seq_cst publish, then seq_cst look at the flag.
  header_->consumer.ack_write.store(++ack_write_, std::memory_order_seq_cst);
  return claim_wake(header_->producer.producer_waiting) ? AckResult::kPushedWake : AckResult::kPushed;
}

bool PlanConsumer::producer_idle() const noexcept {
  return header_->producer.producer_waiting.load(std::memory_order_seq_cst) != 0;
}

PlanConsumer::Backpressure PlanConsumer::backpressure() const noexcept {
  return {header_->producer.backpressure_tokens.load(std::memory_order_relaxed),
          header_->producer.backpressure_reason.load(std::memory_order_relaxed)};
}

}  // namespace kvtier::shm
