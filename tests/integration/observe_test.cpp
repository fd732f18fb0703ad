// What kvtierctl shows of the daemon's decisions (issue 15): `events` from the daemon's event
// ring, `sequence` from paged PlacementRequests, `top` as a live view under a real terminal
// (tmux). Real kvtierd, real kvtier-workload clients, the real kvtierctl; every wait is on a state
// (a workload's `holding` line, a status, a pane's content) and bounded only to end a stuck run.
#include <signal.h>
#include <unistd.h>

#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "process.hpp"

namespace kvtier::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

ChildProcess spawn_workload(const DaemonUnderTest& daemon, const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> argv = {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--name", name};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return ChildProcess::spawn(argv, daemon.dir() / (name + ".log"));
}

// kvtierctl's JSON document (its whole stdout); null when it is not JSON.
Json json_of(const CommandResult& result) { return Json::parse(result.out, nullptr, false); }

// The client named `name` in `kvtierctl status --json`; null when absent.
Json client_named(const DaemonUnderTest& daemon, const std::string& name) {
  const Json status = json_of(daemon.ctl({"status", "--json"}));
  if (status.is_discarded()) return {};
  for (const Json& client : status["clients"]) {
    if (client["name"] == name) return client;
  }
  return {};
}

// The events of `kind` for client `name` among the newest 1024.
std::vector<Json> events_of(const DaemonUnderTest& daemon, const std::string& kind, const std::string& name) {
  const Json events = json_of(daemon.ctl({"events", "1024", "--json"}));
  std::vector<Json> out;
  if (events.is_discarded()) return out;
  for (const Json& event : events["events"]) {
    if (event["kind"] == kind && event["client_name"] == name) out.push_back(event);
  }
  return out;
}

TEST(Events, ListAReclaimOnceAKilledClientsProcessIsGone) {
  DaemonUnderTest daemon(test_name());
  ChildProcess victim = spawn_workload(daemon, "victim", {"--steps", "20", "--hold"});
  ASSERT_TRUE(wait_for_line(daemon.dir() / "victim.log", "holding name=victim")) << daemon.log();
  EXPECT_TRUE(events_of(daemon, "reclaim", "victim").empty());
  victim.signal(SIGKILL);
  // SIGKILL always ends it; the bound only ends a stuck run.
  EXPECT_EQ(victim.wait(std::chrono::seconds(30)), 128 + SIGKILL);
  ASSERT_TRUE(eventually([&] { return !events_of(daemon, "reclaim", "victim").empty(); }))
      << daemon.ctl({"events", "--json"}).out;
  const Json reclaim = events_of(daemon, "reclaim", "victim").front();
  EXPECT_GT(reclaim["sequence"].get<std::uint64_t>(), 0u);
  EXPECT_GT(reclaim["unix_ms"].get<std::uint64_t>(), 0u);
  EXPECT_THAT(reclaim["detail"].get<std::string>(), HasSubstr("exited"));
  // The text form names it too, newest last.
  const CommandResult text = daemon.ctl({"events"});
  EXPECT_EQ(text.exit_code, 0) << text.out;
  EXPECT_THAT(text.out, HasSubstr("reclaim"));
  EXPECT_THAT(text.out, HasSubstr("(victim)"));
}

// One client over a node budget smaller than what its policy wants in T1 is refused rows and
// relieves itself by eviction (as in pressure_test.cpp's run_alone): both decisions are events.
TEST(Events, ListBackpressureAndPressureEvictionsOfAClientOverTheNodeBudget) {
  DaemonUnderTest daemon(test_name(), {"--set", "pools.ddr_bytes_total=" + std::to_string(120 * 1024)});
  ChildProcess solo = spawn_workload(daemon, "solo",
                                     {"--sequences", "2", "--prompt", "32", "--steps", "400", "--interval", "16",
                                      "--window", "16", "--beta", "0.2", "--evict", "0.2", "--hold"});
  ASSERT_TRUE(wait_for_line(daemon.dir() / "solo.log", "holding name=solo")) << read_log(daemon.dir() / "solo.log");
  const Json client = client_named(daemon, "solo");
  ASSERT_FALSE(client.is_null());
  const std::vector<Json> refused = events_of(daemon, "backpressure", "solo");
  const std::vector<Json> evicted = events_of(daemon, "pressure_eviction", "solo");
  ASSERT_FALSE(refused.empty()) << daemon.ctl({"events", "1024"}).out;
  ASSERT_FALSE(evicted.empty()) << daemon.ctl({"events", "1024"}).out;
  // One event per decision, and together they account for the client's counters exactly: the
  // status was taken after the daemon resolved every acknowledgement.
  std::uint64_t refused_tokens = 0, evicted_tokens = 0;
  bool node_budget = false;
  for (const Json& e : refused) {
    refused_tokens += e["tokens"].get<std::uint64_t>();
    EXPECT_GT(e["sequence_id"].get<std::uint32_t>(), 0u);
    EXPECT_THAT(e["detail"].get<std::string>(), HasSubstr("kept in T0"));
    node_budget = node_budget || e["detail"].get<std::string>().find("node_budget") != std::string::npos;
  }
  EXPECT_TRUE(node_budget);
  for (const Json& e : evicted) evicted_tokens += e["tokens"].get<std::uint64_t>();
  EXPECT_EQ(refused_tokens, client["counters"]["backpressure_tokens"].get<std::uint64_t>());
  EXPECT_EQ(evicted_tokens, client["counters"]["pressure_evictions"].get<std::uint64_t>());
  solo.signal(SIGTERM);
  EXPECT_EQ(solo.wait(std::chrono::seconds(30)), 0);
}

TEST(Events, CountsOutsideTheRingAreRefusedWithAClearError) {
  DaemonUnderTest daemon(test_name());
  const CommandResult zero = daemon.ctl({"events", "0"});
  EXPECT_EQ(zero.exit_code, 1);
  EXPECT_THAT(zero.out, HasSubstr("EventsRequest.limit=0 outside 1..1024"));
  const CommandResult many = daemon.ctl({"events", "5000"});
  EXPECT_EQ(many.exit_code, 1);
  EXPECT_THAT(many.out, HasSubstr("invalid_argument"));
  EXPECT_EQ(daemon.ctl({"events", "lots"}).exit_code, 2);
  const CommandResult fine = daemon.ctl({"events", "1024", "--json"});
  EXPECT_EQ(fine.exit_code, 0) << fine.out;
  EXPECT_EQ(json_of(fine)["capacity"], 1024);
}

// A workload whose sequence ends with tokens in T0, T1 and T3, holding still.
struct Placed {
  std::uint32_t client_id = 0, sequence_id = 0;
  Json sequence;  // its status entry
};

Placed hold_placed_sequence(DaemonUnderTest& daemon, std::optional<ChildProcess>& workload) {
  workload.emplace(spawn_workload(daemon, "placed",
                                  {"--sequences", "1", "--prompt", "32", "--steps", "400", "--interval", "16",
                                   "--window", "16", "--beta", "0.2", "--evict", "0.2", "--hold"}));
  Placed out;
  EXPECT_TRUE(wait_for_line(daemon.dir() / "placed.log", "holding name=placed")) << read_log(daemon.dir() / "placed.log");
  const Json client = client_named(daemon, "placed");
  if (client.is_null() || client["sequences"].empty()) {
    ADD_FAILURE() << daemon.ctl({"status", "--json"}).out;
    return out;
  }
  out.client_id = client["client_id"].get<std::uint32_t>();
  out.sequence = client["sequences"][0];
  out.sequence_id = out.sequence["sequence_id"].get<std::uint32_t>();
  return out;
}

TEST(Placement, SmallPagesConcatenateToTheSequencesLengthAndAgreeWithStatus) {
  DaemonUnderTest daemon(test_name());
  std::optional<ChildProcess> workload;
  const Placed placed = hold_placed_sequence(daemon, workload);
  ASSERT_NE(placed.client_id, 0u);
  const std::string cid = std::to_string(placed.client_id), sid = std::to_string(placed.sequence_id);
  const CommandResult paged = daemon.ctl({"sequence", cid, sid, "--json", "--page-runs", "3"});
  ASSERT_EQ(paged.exit_code, 0) << paged.out;
  const Json small = json_of(paged);
  std::uint64_t total = 0;
  std::map<std::string, std::uint64_t> per_tier;
  for (const Json& run : small["runs"]) {
    EXPECT_GT(run["count"].get<std::uint64_t>(), 0u);
    total += run["count"].get<std::uint64_t>();
    per_tier[run["tier"].get<std::string>()] += run["count"].get<std::uint64_t>();
  }
  const Json& s = placed.sequence;
  const std::uint64_t length = s["t0"].get<std::uint64_t>() + s["t1"].get<std::uint64_t>() +
                               s["t2"].get<std::uint64_t>() + s["t3"].get<std::uint64_t>();
  EXPECT_EQ(total, length);
  EXPECT_EQ(small["length"].get<std::uint64_t>(), length);
  for (const char* tier : {"t0", "t1", "t2", "t3"}) {
    EXPECT_EQ(per_tier[tier], s[tier].get<std::uint64_t>()) << tier;
    EXPECT_EQ(small["counts"][tier], s[tier]) << tier;
  }
  EXPECT_GT(s["t1"].get<std::uint64_t>(), 0u) << s;
  EXPECT_GT(s["t3"].get<std::uint64_t>(), 0u) << s;
  // More runs than a page holds: several requests, and the same runs as one big page.
  ASSERT_GT(small["runs"].size(), 3u);
  EXPECT_GT(small["requests"].get<std::uint32_t>(), 1u);
  const Json whole = json_of(daemon.ctl({"sequence", cid, sid, "--json"}));
  EXPECT_EQ(whole["requests"], 1);
  EXPECT_EQ(whole["runs"], small["runs"]);
  // Not a terminal: plain letters, a legend with the counts.
  const CommandResult text = daemon.ctl({"sequence", cid, sid, "--width", "40"});
  EXPECT_EQ(text.exit_code, 0) << text.out;
  EXPECT_THAT(text.out, HasSubstr("T3 (evicted) " + std::to_string(s["t3"].get<std::uint64_t>())));
  EXPECT_EQ(text.out.find('\x1b'), std::string::npos) << text.out;
  // The strip (second line) fits the width: one character per bucket of ceil(length / 40).
  const auto first_newline = text.out.find('\n');
  const std::string strip = text.out.substr(first_newline + 1, text.out.find('\n', first_newline + 1) - first_newline - 1);
  const std::uint64_t bucket = (length + 39) / 40;
  EXPECT_EQ(strip.size(), (length + bucket - 1) / bucket) << text.out;
  EXPECT_EQ(strip.find_first_not_of("012."), std::string::npos) << text.out;
  workload->signal(SIGTERM);
  EXPECT_EQ(workload->wait(std::chrono::seconds(30)), 0);
}

TEST(Placement, UnknownClientsSequencesAndPageSizesOutOfRangeGetErrors) {
  DaemonUnderTest daemon(test_name());
  std::optional<ChildProcess> workload;
  const Placed placed = hold_placed_sequence(daemon, workload);
  ASSERT_NE(placed.client_id, 0u);
  const std::string cid = std::to_string(placed.client_id), sid = std::to_string(placed.sequence_id);
  const CommandResult no_client = daemon.ctl({"sequence", "999", sid});
  EXPECT_EQ(no_client.exit_code, 1);
  EXPECT_THAT(no_client.out, HasSubstr("no engine client 999"));
  const CommandResult no_sequence = daemon.ctl({"sequence", cid, "999"});
  EXPECT_EQ(no_sequence.exit_code, 1);
  EXPECT_THAT(no_sequence.out, HasSubstr("has no sequence 999"));
  for (const char* runs : {"0", "65537"}) {
    const CommandResult bad = daemon.ctl({"sequence", cid, sid, "--page-runs", runs});
    EXPECT_EQ(bad.exit_code, 1) << runs;
    EXPECT_THAT(bad.out, HasSubstr("PlacementRequest.maxRuns=" + std::string(runs) + " outside 1..65536"));
  }
  EXPECT_EQ(daemon.ctl({"sequence", cid}).exit_code, 2);
  // The daemon is unharmed and still answers.
  EXPECT_EQ(daemon.ctl({"sequence", cid, sid, "--page-runs", "65536"}).exit_code, 0);
  workload->signal(SIGTERM);
  EXPECT_EQ(workload->wait(std::chrono::seconds(30)), 0);
}

// tmux on a server of the test's own (-S socket in the daemon's directory), killed at the end.
class Tmux {
 public:
  explicit Tmux(const std::filesystem::path& dir) : socket_((dir / "tmux.sock").string()), config_(dir / "tmux.conf") {
    // The pane stays after its process exits, so the test can read how it exited.
    std::ofstream(config_) << "set -g remain-on-exit on\n";
  }
  ~Tmux() { run({"kill-server"}); }
  CommandResult run(std::vector<std::string> args) const {
    std::vector<std::string> argv = {"/usr/bin/env", "tmux", "-S", socket_, "-f", config_.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv);
  }

 private:
  std::string socket_;
  std::filesystem::path config_;
};

bool tmux_installed() { return run_command({"/usr/bin/env", "tmux", "-V"}).exit_code == 0; }

TEST(Top, ShowsARunningClientUnderARealTerminalAndQuitsWithCodeZeroOnQ) {
  if (!tmux_installed()) GTEST_SKIP() << "tmux is not installed (scripts/install-deps installs it)";
  DaemonUnderTest daemon(test_name());
  ChildProcess client = spawn_workload(daemon, "topclient", {"--steps", "64", "--hold"});
  ASSERT_TRUE(wait_for_line(daemon.dir() / "topclient.log", "holding name=topclient")) << daemon.log();
  Tmux tmux(daemon.dir());
  // The pane runs kvtierctl under sh, which records how kvtierctl exited: tmux itself may see the
  // pane's end before it reaps the process, so #{pane_dead_status} can stay empty for a while.
  const auto exit_file = daemon.dir() / "top.exit";
  const std::string command = KVTIER_TEST_KVTIERCTL + " --socket " + daemon.socket().string() +
                              " top --interval 200; echo $? > " + exit_file.string();
  const CommandResult started = tmux.run({"new-session", "-d", "-s", "top", "-x", "160", "-y", "40", command});
  ASSERT_EQ(started.exit_code, 0) << started.out;
  std::string pane;
  const bool shown = eventually(
      [&] {
        pane = tmux.run({"capture-pane", "-p", "-t", "top"}).out;
        return pane.find("topclient") != std::string::npos && pane.find("MOVES/S") != std::string::npos;
      },
      std::chrono::seconds(60));
  ASSERT_TRUE(shown) << pane;
  EXPECT_EQ(tmux.run({"send-keys", "-t", "top", "q"}).exit_code, 0);
  std::string code;
  EXPECT_TRUE(eventually(
      [&] {
        code = read_log(exit_file);
        return !code.empty() && code.back() == '\n';
      },
      std::chrono::seconds(60)))
      << tmux.run({"capture-pane", "-p", "-t", "top"}).out;
  EXPECT_EQ(code, "0\n") << tmux.run({"capture-pane", "-p", "-t", "top"}).out;
  // And the pane's process is gone.
  EXPECT_TRUE(eventually([&] {
    return tmux.run({"display-message", "-p", "-t", "top", "#{pane_dead}"}).out == "1\n";
  }, std::chrono::seconds(60)));
  client.signal(SIGTERM);
  EXPECT_EQ(client.wait(std::chrono::seconds(30)), 0);
}

TEST(Top, OncePrintsOneFrameWithoutATerminal) {
  DaemonUnderTest daemon(test_name());
  ChildProcess client = spawn_workload(daemon, "onceclient", {"--steps", "16", "--hold"});
  ASSERT_TRUE(wait_for_line(daemon.dir() / "onceclient.log", "holding name=onceclient")) << daemon.log();
  const CommandResult once = daemon.ctl({"top", "--once", "--interval", "50"});
  EXPECT_EQ(once.exit_code, 0) << once.out;
  EXPECT_THAT(once.out, HasSubstr("onceclient"));
  EXPECT_EQ(once.out.find('\x1b'), std::string::npos) << once.out;
  EXPECT_EQ(daemon.ctl({"top", "--interval", "1"}).exit_code, 2);
  client.signal(SIGTERM);
  EXPECT_EQ(client.wait(std::chrono::seconds(30)), 0);
}

}  // namespace
}  // namespace kvtier::testing
