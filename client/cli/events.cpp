// kvtierctl events [N]: the newest N (default 20) decisions kvtierd recorded about its clients
// (EventsRequest, protocol 1.5), oldest first so the newest is the last line.
#include <ctime>

#include "commands.hpp"
#include "ctl_support.hpp"
#include "safe_text.hpp"

namespace kvtier::cli {
namespace {

constexpr std::uint32_t kDefaultEvents = 20;

const char* kind_name(kvtier_event_kind kind) {
  switch (kind) {
    case KVTIER_EVENT_PRESSURE_DEMOTION: return "pressure_demotion";
    case KVTIER_EVENT_PRESSURE_EVICTION: return "pressure_eviction";
    case KVTIER_EVENT_BACKPRESSURE: return "backpressure";
    case KVTIER_EVENT_PLAN_FAILED: return "plan_failed";
    case KVTIER_EVENT_RECLAIM: return "reclaim";
    case KVTIER_EVENT_SESSION_ERROR: return "session_error";
  }
  return "unknown";  // a newer daemon's kind
}

// "2026-12-02T14:25:45.123Z" (UTC).
std::string utc_time(std::uint64_t unix_ms) {
  const auto seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[96];
  std::snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<unsigned>(unix_ms % 1000));
  return text;
}

// The --json document of `events` (docs/kvtierctl-json.md).
void write_events_json(const kvtier_daemon_events& e) {
  Json events = Json::array();
  for (std::size_t i = 0; i < e.event_count; ++i) {
    const kvtier_event& v = e.events[i];
    events.push_back({{"sequence", v.sequence},
                      {"unix_ms", v.unix_ms},
                      {"kind", kind_name(v.kind)},
                      {"client_id", v.client_id},
                      {"client_name", v.client_name},
                      {"sequence_id", v.sequence_id},
                      {"tokens", v.tokens},
                      {"detail", v.detail}});
  }
  print_json(Json{{"capacity", e.capacity}, {"recorded", e.recorded}, {"events", std::move(events)}});
}

void print_events_text(const kvtier_daemon_events& e) {
  std::printf("%zu of %llu event(s) recorded (kvtierd keeps the newest %u), oldest first\n", e.event_count,
              ull(e.recorded), e.capacity);
  for (std::size_t i = 0; i < e.event_count; ++i) {
    const kvtier_event& v = e.events[i];
    // Names and details are the daemon's text: escaped, so none can move the cursor.
    std::printf("%6llu %s %-17s client %u (%s)", ull(v.sequence), utc_time(v.unix_ms).c_str(), kind_name(v.kind),
                v.client_id, printable(v.client_name).c_str());
    if (v.sequence_id != 0) std::printf(" sequence %u", v.sequence_id);
    if (v.tokens != 0) std::printf(" tokens %llu", ull(v.tokens));
    if (v.detail[0] != '\0') std::printf("  %s", printable(v.detail).c_str());
    std::printf("\n");
  }
}

}  // namespace

int run_events(const GlobalOptions& options, std::span<const std::string_view> args) {
  if (args.size() > 1) return usage_error("events", "takes at most one argument, N");
  std::uint32_t limit = kDefaultEvents;
  if (!args.empty()) {
    // The range is the daemon's to check (it says how many it keeps).
    const auto n = parse_u32(args[0]);
    if (!n) return usage_error("events", "N must be a number, not '" + printable(args[0]) + "'");
    limit = *n;
  }
  Client client;
  kvtier_status status = connect_admin(options, client);
  if (status != KVTIER_OK) return report(status, client);
  DaemonEventsPtr events;
  status = client.daemon_events(limit, events);
  if (status != KVTIER_OK) return report(status, client);
  if (options.json) {
    write_events_json(*events);
  } else {
    print_events_text(*events);
  }
  return kExitOk;
}

}  // namespace kvtier::cli
