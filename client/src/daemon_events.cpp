// Client::daemon_events and Client::sequence_placement: the admin EventsReply and one
// PlacementReply page copied into the C ABI's structs, each one allocation the caller frees
// with its _free function.
#include <memory>
#include <vector>

#include "client.hpp"

namespace kvtier::client {
namespace {

// kvtier_daemon_events plus the storage its pointer refers to; freed as one object.
struct EventsHolder : kvtier_daemon_events {
  std::vector<kvtier_event> storage;
};

struct PlacementHolder : kvtier_sequence_placement {
  std::vector<kvtier_tier_run> storage;
};

}  // namespace

Result<kvtier_daemon_events*> Client::daemon_events(std::uint32_t limit) {
  capnp::MallocMessageBuilder message;
  message.initRoot<wire::ClientMessage>().initEventsRequest().setLimit(limit);
  auto reply = request(message);
  if (!reply) return tl::unexpected(reply.error());
  auto holder = std::make_unique<EventsHolder>();
  auto filled = protocol::capture_protocol_errors([&]() -> Status {
    auto root = reply->root<wire::DaemonMessage>();
    if (root.which() != wire::DaemonMessage::EVENTS_REPLY) return make_error(Errc::kProtocol, "expected EventsReply");
    auto events = root.getEventsReply();
    holder->capacity = events.getCapacity();
    holder->recorded = events.getRecorded();
    for (auto e : events.getEvents()) {
      kvtier_event out{};
      out.sequence = e.getSequence();
      out.unix_ms = e.getUnixMs();
      out.kind = static_cast<kvtier_event_kind>(e.getKind());
      out.client_id = e.getClientId();
      copy_text(out.client_name, sizeof(out.client_name), e.getClientName());
      out.sequence_id = e.getSequenceId();
      out.tokens = e.getTokens();
      copy_text(out.detail, sizeof(out.detail), e.getDetail());
      holder->storage.push_back(out);
    }
    return {};
  });
  if (!filled) return tl::unexpected(filled.error());
  holder->event_count = holder->storage.size();
  holder->events = holder->storage.data();
  return holder.release();
}

Result<kvtier_sequence_placement*> Client::sequence_placement(std::uint32_t client_id, std::uint32_t sequence_id,
                                                              std::uint32_t first_position, std::uint32_t max_runs) {
  capnp::MallocMessageBuilder message;
  auto ask = message.initRoot<wire::ClientMessage>().initPlacementRequest();
  ask.setClientId(client_id);
  ask.setSequenceId(sequence_id);
  ask.setFirstPosition(first_position);
  ask.setMaxRuns(max_runs);
  auto reply = request(message);
  if (!reply) return tl::unexpected(reply.error());
  auto holder = std::make_unique<PlacementHolder>();
  auto filled = protocol::capture_protocol_errors([&]() -> Status {
    auto root = reply->root<wire::DaemonMessage>();
    if (root.which() != wire::DaemonMessage::PLACEMENT_REPLY) {
      return make_error(Errc::kProtocol, "expected PlacementReply");
    }
    auto page = root.getPlacementReply();
    holder->length = page.getLength();
    holder->first_position = page.getFirstPosition();
    holder->next_position = page.getNextPosition();
    // A reply that does not add up would make a caller that pages on it loop or overrun: refused.
    std::uint64_t end = holder->first_position;
    for (auto run : page.getRuns()) {
      const auto tier = static_cast<std::uint32_t>(run.getTier());
      if (tier > KVTIER_T3 || run.getCount() == 0) return make_error(Errc::kProtocol, "PlacementReply run out of range");
      holder->storage.push_back(kvtier_tier_run{static_cast<kvtier_tier>(tier), run.getCount()});
      end += run.getCount();
    }
    if (holder->first_position != first_position || end != holder->next_position || end > holder->length ||
        (end == first_position && end != holder->length)) {
      return make_error(Errc::kProtocol, "PlacementReply runs do not add up to nextPosition within length");
    }
    return {};
  });
  if (!filled) return tl::unexpected(filled.error());
  holder->run_count = holder->storage.size();
  holder->runs = holder->storage.data();
  return holder.release();
}

void free_daemon_events(kvtier_daemon_events* events) { delete static_cast<EventsHolder*>(events); }

void free_sequence_placement(kvtier_sequence_placement* placement) {
  delete static_cast<PlacementHolder*>(placement);
}

}  // namespace kvtier::client
