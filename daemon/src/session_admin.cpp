// Session, the admin requests beyond status: the event log and a sequence's placement
// (PROTOCOL.md §4 "Events and placement"). Bad input gets an ErrorReply and the session stays.
#include "kvtier/protocol/defaults.hpp"
#include "server.hpp"
#include "session.hpp"

namespace kvtier::daemon {

Status Session::on_events(wire::EventsRequest::Reader request) {
  if (auto ok = require_admin("EventsRequest"); !ok) return ok;
  const std::uint32_t limit = request.getLimit();
  const std::size_t capacity = server_.events().capacity();
  if (limit == 0 || limit > capacity) {
    return make_error(Errc::kInvalidArgument, "EventsRequest.limit=" + std::to_string(limit) + " outside 1.." +
                                                  std::to_string(capacity) + " (the events kvtierd keeps)");
  }
  capnp::MallocMessageBuilder reply;
  server_.build_events(limit, reply);
  send(reply);
  return {};
}

Status Session::on_placement(wire::PlacementRequest::Reader request) {
  if (auto ok = require_admin("PlacementRequest"); !ok) return ok;
  const std::uint32_t max_runs = request.getMaxRuns();
  if (max_runs == 0 || max_runs > protocol::kMaxPlacementRuns) {
    return make_error(Errc::kInvalidArgument, "PlacementRequest.maxRuns=" + std::to_string(max_runs) + " outside 1.." +
                                                  std::to_string(protocol::kMaxPlacementRuns));
  }
  return server_.placement(request.getClientId(), request.getSequenceId(), request.getFirstPosition(), max_runs,
                           [self = shared_from_this()](Result<PlacementPage> page) {
    if (self->state_ == State::kClosed) return;
    if (!page) return self->send_error(page.error());  // unknown sequence, position: the session stays
    capnp::MallocMessageBuilder reply;
    fill_placement_reply(*page, reply);
    self->send(reply);
  });
}

}  // namespace kvtier::daemon
