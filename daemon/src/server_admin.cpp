// Server, the admin's other views: the event log and a sequence's placement (PROTOCOL.md §4
// "Events and placement").
#include <asio/post.hpp>

#include "kvtier/protocol/control.capnp.h"
#include "server.hpp"
#include "session.hpp"

namespace kvtier::daemon {
namespace {

wire::Tier to_wire(tier::Tier tier) {
  switch (tier) {
    case tier::Tier::kT0: return wire::Tier::T0;
    case tier::Tier::kT1: return wire::Tier::T1;
    case tier::Tier::kT2: return wire::Tier::T2;
    case tier::Tier::kT3: return wire::Tier::T3;
  }
  return wire::Tier::T3;
}

// EventKind crosses as its number (event_log.hpp mirrors the wire's enum).
static_assert(static_cast<int>(EventKind::kPressureDemotion) == static_cast<int>(wire::EventKind::PRESSURE_DEMOTION));
static_assert(static_cast<int>(EventKind::kPressureEviction) == static_cast<int>(wire::EventKind::PRESSURE_EVICTION));
static_assert(static_cast<int>(EventKind::kBackpressure) == static_cast<int>(wire::EventKind::BACKPRESSURE));
static_assert(static_cast<int>(EventKind::kPlanFailed) == static_cast<int>(wire::EventKind::PLAN_FAILED));
static_assert(static_cast<int>(EventKind::kReclaim) == static_cast<int>(wire::EventKind::RECLAIM));
static_assert(static_cast<int>(EventKind::kSessionError) == static_cast<int>(wire::EventKind::SESSION_ERROR));

}  // namespace

void Server::record_event(Event event) {
  if (event.client_name.empty()) {
    if (auto it = clients_.find(event.client_id); it != clients_.end()) {
      event.client_name = describe(it->second).name;
    }
  }
  events_.record(std::move(event));
}

void Server::build_events(std::uint32_t limit, capnp::MallocMessageBuilder& message) const {
  auto reply = message.initRoot<wire::DaemonMessage>().initEventsReply();
  reply.setCapacity(static_cast<std::uint32_t>(events_.capacity()));
  reply.setRecorded(events_.recorded());
  const std::vector<const Event*> latest = events_.latest(limit);
  auto list = reply.initEvents(static_cast<unsigned>(latest.size()));
  for (unsigned i = 0; i < latest.size(); ++i) {
    const Event& event = *latest[i];
    auto out = list[i];
    out.setSequence(event.sequence);
    out.setUnixMs(event.unix_ms);
    out.setKind(static_cast<wire::EventKind>(event.kind));  // same numbers (event_log.hpp)
    out.setClientId(event.client_id);
    out.setClientName(event.client_name);
    out.setSequenceId(event.sequence_id);
    out.setTokens(event.tokens);
    out.setDetail(event.detail);
  }
}

Status Server::placement(std::uint32_t client_id, std::uint32_t sequence_id, std::uint32_t first_position,
                         std::uint32_t max_runs, std::function<void(Result<PlacementPage>)> done) {
  auto it = clients_.find(client_id);
  if (it == clients_.end() || !it->second.engine) {
    return make_error(Errc::kNotFound, "no engine client " + std::to_string(client_id));
  }
  data_plane_.placement(client_id, sequence_id, first_position, max_runs, std::move(done));
  return {};
}

// The wire form of a page (used by the session that asked).
void fill_placement_reply(const PlacementPage& page, capnp::MallocMessageBuilder& message) {
  auto reply = message.initRoot<wire::DaemonMessage>().initPlacementReply();
  reply.setLength(page.length);
  reply.setFirstPosition(page.first_position);
  reply.setNextPosition(page.next_position);
  auto runs = reply.initRuns(static_cast<unsigned>(page.runs.size()));
  for (unsigned i = 0; i < page.runs.size(); ++i) {
    runs[i].setTier(to_wire(page.runs[i].tier));
    runs[i].setCount(page.runs[i].count);
  }
}

}  // namespace kvtier::daemon
