// kvtierctl top [--interval MS] [--once]: a live view of kvtierd's clients and sequences sorted
// by DDR use, redrawn every interval (default 1000 ms) until 'q' (or SIGINT/SIGTERM).
//
// Each frame is one StatusRequest. Rates are differences between the last two frames divided by
// the time between them as kvtierctl measured it: token moves/s (ClientStatus.movesSent), plans/s
// (plansSent) and DDR B/s, the net change of the DDR bytes the client holds. Bytes moved per
// second are not shown: a move may copy a native row, an int8 row or nothing (T3), and status
// does not say which. The first frame (and a client new since the last one) shows "-".
//
// On a terminal each frame clears the screen and redraws (ANSI escapes) and lines are cut to its
// width; otherwise frames are printed one after another, separated by a blank line. Keys come
// from stdin (terminal.hpp). --once prints one frame, taken one interval after a first sample so
// it has rates, and exits.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "commands.hpp"
#include "ctl_support.hpp"
#include "safe_text.hpp"
#include "terminal.hpp"

namespace kvtier::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  Clock::time_point at;
  std::map<std::uint32_t, kvtier_client_info> clients;  // pointers inside are not used
};

struct Rates {
  bool known = false;
  double moves = 0, plans = 0, ddr = 0;
};

Rates rates_of(const kvtier_client_info& now, const Sample* before, Clock::time_point at) {
  if (before == nullptr) return {};
  auto it = before->clients.find(now.client_id);
  const double seconds = std::chrono::duration<double>(at - before->at).count();
  if (it == before->clients.end() || seconds <= 0) return {};
  const kvtier_client_info& then = it->second;
  return {true, static_cast<double>(now.moves_sent - then.moves_sent) / seconds,
          static_cast<double>(now.plans_sent - then.plans_sent) / seconds,
          (static_cast<double>(now.ddr_bytes_used) - static_cast<double>(then.ddr_bytes_used)) / seconds};
}

std::string rate_text(const Rates& r, double value) {
  if (!r.known) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", value);
  return text;
}

// Bytes of one T1 token of the client: its DDR bytes over its slots in use (exact: the daemon
// counts DDR use as slots times that size); 0 before it holds any.
std::uint64_t bytes_per_slot(const kvtier_client_info& c) {
  return c.pool_slots_used == 0 ? 0 : c.ddr_bytes_used / c.pool_slots_used;
}

struct Frame {
  std::vector<std::string> lines;
  template <class... Args>
  void add(const char* format, Args... args) {
    char line[512];
    std::snprintf(line, sizeof(line), format, args...);
    lines.emplace_back(line);
  }
};

Frame render(const kvtier_daemon_status& s, const Sample* before, Clock::time_point at, unsigned interval_ms) {
  Frame f;
  std::string ddr = std::to_string(s.ddr_bytes_used);
  if (s.ddr_bytes_total != 0) ddr += " of " + std::to_string(s.ddr_bytes_total);
  f.add("kvtierd %s  up %llus  DDR %s bytes  int8 %llu bytes  %zu client(s)  every %u ms, q quits",
        printable(s.daemon_version).c_str(), ull(s.uptime_seconds), ddr.c_str(), ull(s.int8_bytes_used), s.client_count,
        interval_ms);
  f.lines.emplace_back();
  std::vector<const kvtier_client_info*> clients;
  for (std::size_t i = 0; i < s.client_count; ++i) clients.push_back(&s.clients[i]);
  std::stable_sort(clients.begin(), clients.end(), [](const auto* a, const auto* b) {
    return a->ddr_bytes_used > b->ddr_bytes_used;
  });
  f.add("%6s %-20s %8s %12s %12s %11s %9s %8s %11s %9s %6s", "CLIENT", "NAME", "PID", "DDR_BYTES", "DDR_SHARE",
        "SLOTS", "MOVES/S", "PLANS/S", "DDR_B/S", "KEPT_HBM", "ERRORS");
  for (const kvtier_client_info* c : clients) {
    const Rates r = rates_of(*c, before, at);
    const std::string slots = std::to_string(c->pool_slots_used) + "/" + std::to_string(c->pool_slots);
    std::string name = printable(c->name);
    if (c->closing != 0) name += " (closing)";
    f.add("%6u %-20.20s %8u %12llu %12llu %11s %9s %8s %11s %9llu %6llu", c->client_id, name.c_str(), c->pid,
          ull(c->ddr_bytes_used), ull(c->ddr_share_bytes), slots.c_str(), rate_text(r, r.moves).c_str(),
          rate_text(r, r.plans).c_str(), rate_text(r, r.ddr).c_str(), ull(c->backpressure_tokens), ull(c->errors));
  }
  f.lines.emplace_back();
  struct Row {
    const kvtier_client_info* client;
    const kvtier_sequence_info* sequence;
    std::uint64_t ddr;
  };
  std::vector<Row> rows;
  for (const kvtier_client_info* c : clients) {
    for (std::size_t k = 0; k < c->sequence_count; ++k) {
      rows.push_back({c, &c->sequences[k], std::uint64_t{c->sequences[k].tokens_t1} * bytes_per_slot(*c)});
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ddr > b.ddr; });
  f.add("%6s %8s %-20s %8s %8s %8s %8s %8s %12s %9s", "CLIENT", "SEQUENCE", "NAME", "TOKENS", "T0", "T1", "T2", "T3",
        "DDR_BYTES", "DESTROYED");
  for (const Row& row : rows) {
    const kvtier_sequence_info& q = *row.sequence;
    f.add("%6u %8u %-20.20s %8u %8u %8u %8u %8u %12llu %8.1f%%", row.client->client_id, q.sequence_id,
          printable(row.client->name).c_str(), q.tokens, q.tokens_t0, q.tokens_t1, q.tokens_t2, q.tokens_t3,
          ull(row.ddr), 100.0 * q.destroyed_fraction);
  }
  return f;
}

void show(const Frame& frame, bool terminal) {
  std::string out;
  const TerminalSize size = terminal ? terminal_size() : TerminalSize{};
  if (terminal) out += "\x1b[H\x1b[2J";  // home, clear
  std::size_t rows = 0;
  for (const std::string& line : frame.lines) {
    if (size.rows != 0 && rows + 1 >= size.rows) break;  // the rest does not fit
    // Lines are ASCII apart from escaped names (printable() keeps non-control UTF-8), so cutting
    // at a byte count may cut a name's character short of the width: harmless on a terminal.
    out += size.columns != 0 && line.size() > size.columns ? line.substr(0, size.columns) : line;
    out += terminal ? "\r\n" : "\n";
    ++rows;
  }
  if (!terminal) out += "\n";
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
}

Sample sample_of(const kvtier_daemon_status& s, Clock::time_point at) {
  Sample sample{at, {}};
  for (std::size_t i = 0; i < s.client_count; ++i) sample.clients.emplace(s.clients[i].client_id, s.clients[i]);
  return sample;
}

}  // namespace

int run_top(const GlobalOptions& options, std::span<const std::string_view> args) {
  if (options.json) return usage_error("top", "has no --json form (use `kvtierctl status --json`)");
  std::uint32_t interval_ms = 1000;
  bool once = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--once" || args[i] == "-n") {
      once = true;
    } else if (args[i] == "--interval") {
      const auto n = i + 1 < args.size() ? parse_u32(args[i + 1]) : std::nullopt;
      if (!n || *n < 10 || *n > 3'600'000) return usage_error("top", "--interval needs a number of ms in 10..3600000");
      interval_ms = *n;
      ++i;
    } else {
      return usage_error("top", "unexpected argument '" + printable(args[i]) + "'");
    }
  }
  Client client;
  kvtier_status status = connect_admin(options, client);
  if (status != KVTIER_OK) return report(status, client);
  const std::chrono::milliseconds interval(interval_ms);
  std::optional<Sample> before;
  int code = kExitOk;
  {
    TerminalSession terminal;  // restored before anything below prints an error
    for (;;) {
      DaemonStatusPtr snapshot;
      status = client.daemon_status(snapshot);
      if (status != KVTIER_OK) break;
      const Clock::time_point at = Clock::now();
      if (!once || before) show(render(*snapshot, before ? &*before : nullptr, at, interval_ms), terminal.stdout_is_terminal());
      if (once && before) break;
      before = sample_of(*snapshot, at);
      const std::optional<char> key = terminal.wait_key(interval);
      if (terminal.signal_received() != 0) {
        code = 128 + terminal.signal_received();
        break;
      }
      if (!once && key && (*key == 'q' || *key == 'Q')) break;
    }
  }
  if (status != KVTIER_OK) return report(status, client);
  return code;
}

}  // namespace kvtier::cli
