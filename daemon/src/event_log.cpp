#include "event_log.hpp"

#include <algorithm>
#include <cassert>
#include <chrono>

namespace kvtier::daemon {

std::uint64_t unix_ms_now() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

std::string cut_utf8(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  std::size_t end = max_bytes;
  // Back off continuation bytes (10xxxxxx) so the cut lands before a character's lead byte.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return std::string(text.substr(0, end));
}

EventLog::EventLog(std::size_t capacity) : capacity_(capacity) {
  assert(capacity > 0);
  ring_.reserve(capacity);
}

std::uint64_t EventLog::record(Event event) {
  event.sequence = ++recorded_;
  if (event.detail.size() > kMaxDetailBytes) event.detail = cut_utf8(event.detail, kMaxDetailBytes);
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(event));
  } else {
    // recorded_ - 1 is the index this event takes in an endless array; the slot held the oldest.
    ring_[(recorded_ - 1) % capacity_] = std::move(event);
  }
  return recorded_;
}

std::vector<const Event*> EventLog::latest(std::size_t limit) const {
  const std::size_t n = std::min(limit, ring_.size());
  std::vector<const Event*> out;
  out.reserve(n);
  // Event number k (1-based) lives at ring_[(k - 1) % capacity_] while it is kept.
  for (std::uint64_t k = recorded_ - n + 1; k <= recorded_; ++k) out.push_back(&ring_[(k - 1) % capacity_]);
  return out;
}

}  // namespace kvtier::daemon
