#include "kvtier/shm/score_ring.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "kvtier/base/check.hpp"
#include "ring_common.hpp"

namespace kvtier::shm {
namespace {

ScoreRingHeader* ring_header(std::span<std::byte> ring, std::uint32_t capacity) noexcept {
  KVTIER_CHECK(is_valid_ring_capacity(capacity), "score ring capacity not a valid power of two");
  KVTIER_CHECK(ring.size() >= score_ring_bytes(capacity),
               "score ring span smaller than its capacity");
  KVTIER_CHECK(reinterpret_cast<std::uintptr_t>(ring.data()) % kCacheLine == 0,
               "score ring not cache-line aligned");
  return reinterpret_cast<ScoreRingHeader*>(ring.data());
}

ScoreRecord* ring_slots(std::span<std::byte> ring) noexcept {
  return reinterpret_cast<ScoreRecord*>(ring.data() + sizeof(ScoreRingHeader));
}

}  // namespace

ScoreProducer::ScoreProducer(std::span<std::byte> ring, std::uint32_t capacity) noexcept
    : header_(ring_header(ring, capacity)),
      slots_(ring_slots(ring)),
      capacity_(capacity),
      mask_(capacity - 1u),
      write_(header_->producer.write.load(std::memory_order_relaxed)),
      read_cache_(header_->consumer.read.load(std::memory_order_acquire)),
      dropped_(header_->producer.dropped.load(std::memory_order_relaxed)) {}

PushResult ScoreProducer::push(const ScoreRecord& record) noexcept {
  if (write_ - read_cache_ >= capacity_) {
    // Acquire: the daemon finished copying a slot out before it published the new read.
    read_cache_ = header_->consumer.read.load(std::memory_order_acquire);
    if (write_ - read_cache_ >= capacity_) {
      header_->producer.dropped.store(++dropped_, std::memory_order_relaxed);
      return PushResult::kDropped;
    }
  }
  std::memcpy(&slots_[write_ & mask_], &record, sizeof(ScoreRecord));
  // Dekker with ScoreConsumer::announce_sleep: seq_cst publish, then seq_cst look at the flag.
  header_->producer.write.store(++write_, std::memory_order_seq_cst);
  auto& waiting = header_->consumer.consumer_waiting;
  if (waiting.load(std::memory_order_seq_cst) != 0) {
    std::uint32_t expected = 1;
    if (waiting.compare_exchange_strong(expected, 0, std::memory_order_relaxed)) {
      return PushResult::kPushedWake;
    }
  }
  return PushResult::kPushed;
}

BatchPushResult ScoreProducer::push_batch(std::span<const ScoreRecord> records) noexcept {
  BatchPushResult result;
  if (records.empty()) return result;
  if (write_ - read_cache_ + records.size() > capacity_) {
    read_cache_ = header_->consumer.read.load(std::memory_order_acquire);  // as in push()
  }
  const std::uint64_t room = capacity_ - std::min<std::uint64_t>(write_ - read_cache_, capacity_);
  result.pushed = static_cast<std::size_t>(std::min<std::uint64_t>(room, records.size()));
  result.dropped = records.size() - result.pushed;
  if (result.dropped != 0) {
    dropped_ += result.dropped;
    header_->producer.dropped.store(dropped_, std::memory_order_relaxed);
  }
  if (result.pushed == 0) return result;
  // At most two contiguous runs of slots: up to the end of the ring, then from slot 0.
  const auto start = static_cast<std::size_t>(write_ & mask_);
  const std::size_t first_run = std::min<std::size_t>(result.pushed, capacity_ - start);
  std::memcpy(&slots_[start], records.data(), first_run * sizeof(ScoreRecord));
  std::memcpy(&slots_[0], records.data() + first_run,
              (result.pushed - first_run) * sizeof(ScoreRecord));
  write_ += result.pushed;
  // One publish for the whole prefix; same Dekker pairing as push().
  header_->producer.write.store(write_, std::memory_order_seq_cst);
  auto& waiting = header_->consumer.consumer_waiting;
  if (waiting.load(std::memory_order_seq_cst) != 0) {
    std::uint32_t expected = 1;
    result.wake = waiting.compare_exchange_strong(expected, 0, std::memory_order_relaxed);
  }
  return result;
}

std::uint64_t ScoreProducer::free_slots() noexcept {
  read_cache_ = header_->consumer.read.load(std::memory_order_acquire);
  return detail::free_slots(write_, read_cache_, capacity_);
}

ScoreConsumer::ScoreConsumer(std::span<std::byte> ring, std::uint32_t capacity) noexcept
    : header_(ring_header(ring, capacity)),
      slots_(ring_slots(ring)),
      capacity_(capacity),
      read_(header_->consumer.read.load(std::memory_order_relaxed)),
      last_write_(read_) {}

Result<std::size_t> ScoreConsumer::available(std::size_t max) {
  const std::uint64_t write = header_->producer.write.load(std::memory_order_acquire);
  if (auto ok = detail::check_write_counter("score", write, last_write_, read_, capacity_); !ok) {
    return tl::unexpected(ok.error());
  }
  last_write_ = write;
  available_ = static_cast<std::size_t>(std::min<std::uint64_t>(write - read_, max));
  return available_;
}

Status ScoreConsumer::take(std::size_t k, ScoreRecord& out) const {
  KVTIER_CHECK(k < available_, "score ring: take() beyond what available() granted");
  const std::uint64_t index = read_ + k;
  std::memcpy(&out, &slots_[index & (capacity_ - 1u)], sizeof(ScoreRecord));
  // Only the copy is looked at: the client may still scribble on the slot.
  if (out.count <= kScoresPerRecord) return {};
  return make_error(Errc::kProtocol, "score record " + std::to_string(index) + " has count " +
                                         std::to_string(out.count) + " > " + std::to_string(kScoresPerRecord));
}

void ScoreConsumer::release(std::size_t count) noexcept {
  KVTIER_CHECK(count <= available_, "score ring: release() beyond what available() granted");
  read_ += count;
  available_ = 0;
  header_->consumer.read.store(read_, std::memory_order_release);
}

Result<std::size_t> ScoreConsumer::pop(std::span<ScoreRecord> out) {
  auto count = available(out.size());
  if (!count) return count;
  for (std::size_t k = 0; k < *count; ++k) {
    if (auto ok = take(k, out[k]); !ok) return tl::unexpected(ok.error());
  }
  release(*count);
  return count;
}

bool ScoreConsumer::announce_sleep() noexcept {
  header_->consumer.consumer_waiting.store(1, std::memory_order_seq_cst);
  if (header_->producer.write.load(std::memory_order_seq_cst) != read_) {
    cancel_sleep();
    return false;
  }
  return true;
}

void ScoreConsumer::cancel_sleep() noexcept {
  header_->consumer.consumer_waiting.store(0, std::memory_order_relaxed);
}

bool ScoreProducer::consumer_idle() const noexcept {
  // Acquire (seq_cst) pairs with announce_sleep's store: what the daemon did before it (plans
  // published from these records) is visible after a true.
  return header_->consumer.consumer_waiting.load(std::memory_order_seq_cst) != 0;
}

std::uint64_t ScoreConsumer::dropped() const noexcept {
  return header_->producer.dropped.load(std::memory_order_relaxed);
}

}  // namespace kvtier::shm
