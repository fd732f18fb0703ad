// EventLog: the newest decisions kvtierd took about its clients, for `kvtierctl events`
// (EventsRequest, PROTOCOL.md §4 "Events and placement"). One event per decision — a relief
// plan, a refused admission, a failed plan, a reclaim, an ended session — never one per token,
// so the log costs nothing on the per-step path.
//
// A bounded ring of the newest `capacity` events: recording into a full ring drops the oldest.
// Events are numbered 1, 2, ... in the order they are recorded; latest() lists oldest first, so
// the newest event is the last one printed (like `tail`).
//
// Thread-safety: one thread, the control io_context's. The data plane stamps its events where it
// decides and posts them there (DataPlane::start's event handler); the Server records them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::daemon {

// The wire's EventKind (protocol/schema/control.capnp), same numbers.
enum class EventKind : std::uint8_t {
  kPressureDemotion = 0,
  kPressureEviction = 1,
  kBackpressure = 2,
  kPlanFailed = 3,
  kReclaim = 4,
  kSessionError = 5,
};

struct Event {
  std::uint64_t sequence = 0;  // set by EventLog::record
  std::uint64_t unix_ms = 0;   // when it was decided (wall clock)
  EventKind kind = EventKind::kSessionError;
  std::uint32_t client_id = 0;
  std::string client_name;        // filled in by the Server (the data plane knows no names)
  std::uint32_t sequence_id = 0;  // 0: none
  std::uint64_t tokens = 0;       // 0: none
  std::string detail;             // cut to EventLog::kMaxDetailBytes by record
};

// Milliseconds since 1970 now (the realtime clock).
std::uint64_t unix_ms_now();

class EventLog {
 public:
  static constexpr std::size_t kDefaultCapacity = 1024;
  // Keeps the EventsReply of a full ring well inside the frame limit (1024 events with 63-byte
  // names and 120-byte details are about 300 KiB).
  static constexpr std::size_t kMaxDetailBytes = 120;

  // Precondition (asserts): capacity > 0.
  explicit EventLog(std::size_t capacity = kDefaultCapacity);

  // Numbers `event` and keeps it, dropping the oldest event when the ring is full; its detail is
  // cut to kMaxDetailBytes at a UTF-8 character boundary. Returns the event's sequence number.
  std::uint64_t record(Event event);

  // The newest min(limit, size()) events, oldest first. The pointers are valid until the next
  // record().
  std::vector<const Event*> latest(std::size_t limit) const;

  std::size_t size() const noexcept { return ring_.size(); }
  std::size_t capacity() const noexcept { return capacity_; }
  // Events recorded since construction (the newest one's sequence number; 0: none yet).
  std::uint64_t recorded() const noexcept { return recorded_; }

 private:
  std::size_t capacity_;
  std::vector<Event> ring_;  // grows to capacity_, then ring_[recorded_ % capacity_] is the oldest
  std::uint64_t recorded_ = 0;
};

// `text` cut to at most `max_bytes`, never inside a UTF-8 sequence.
std::string cut_utf8(std::string_view text, std::size_t max_bytes);

}  // namespace kvtier::daemon
