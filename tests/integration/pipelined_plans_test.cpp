// Plans pipelined across sequences through real processes: kvtierd keeps up to
// limits.plans_in_flight plans of one client unacknowledged, one per sequence. kvtier-workload
// --pipeline (lockstep: it syncs after every step and every batch of acknowledgements) polls
// every plan on the ring before it applies any, then applies and acknowledges them newest first.
// Its two sequences decide at the same steps, so with the window both sequences' plans are on
// the ring together at every decision; with limits.plans_in_flight=1 never more than one.
#include <signal.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "workload_run.hpp"

namespace kvtier::testing {
namespace {

using Json = nlohmann::json;

std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

ChildProcess spawn_pipelined(const DaemonUnderTest& daemon) {
  return ChildProcess::spawn({KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--name", "pipelined",
                              "--pipeline", "--hold", "--sequences", "2", "--prompt", "32", "--steps", "100",
                              "--interval", "16", "--window", "16", "--beta", "0.5", "--expect-exact",
                              "--audit-every", "1"},
                             daemon.dir() / "pipelined.log");
}

// The workload's client in `kvtierctl status --json`, read while it holds; null when absent.
Json holding_client(const DaemonUnderTest& daemon) {
  const Json status = Json::parse(daemon.ctl({"status", "--json"}).out, nullptr, false);
  if (status.is_discarded()) return {};
  for (const Json& client : status["clients"]) {
    if (client["name"] == "pipelined") return client;
  }
  return {};
}

// Runs the workload to its hold, reads its client's status, stops it; the summary and status.
std::pair<WorkloadRun, Json> run_held(DaemonUnderTest& daemon) {
  ChildProcess workload = spawn_pipelined(daemon);
  EXPECT_TRUE(wait_for_line(daemon.dir() / "pipelined.log", "holding name=pipelined")) << daemon.log();
  const Json client = holding_client(daemon);
  workload.signal(SIGTERM);
  const auto code = workload.wait(std::chrono::seconds(60));  // a stuck workload only; nothing timed
  return {workload_result(code.value_or(-1), read_log(daemon.dir() / "pipelined.log")), client};
}

TEST(PipelinedPlans, TwoSequencesOfOneClientHaveTheirPlansInFlightTogetherAndBothCommit) {
  DaemonUnderTest daemon(test_name());
  const auto [run, client] = run_held(daemon);
  ASSERT_EQ(run.exit_code, 0) << run.out << daemon.log();  // 0: outputs exact, KV audit clean
  EXPECT_EQ(run.number("max_in_flight"), 2);
  EXPECT_GT(run.number("plans"), 2);
  EXPECT_EQ(run.number("plans_failed"), 0);
  EXPECT_EQ(run.number("steps_identical"), run.number("steps_compared"));
  ASSERT_FALSE(client.is_null()) << daemon.log();
  // Every plan the workload applied and acknowledged out of order was committed in kvtierd.
  EXPECT_EQ(client["counters"]["plans_acked"].get<double>(), run.number("plans"));
  EXPECT_EQ(client["counters"]["plans_sent"], client["counters"]["plans_acked"]);  // none left in flight
  EXPECT_EQ(client["counters"]["plans_failed"], 0);
  EXPECT_EQ(client["counters"]["errors"], 0);
  ASSERT_EQ(client["sequences"].size(), 2u);
  long t1 = 0;
  for (const Json& sequence : client["sequences"]) {
    EXPECT_GT(sequence["t1"].get<long>(), 0) << sequence.dump();
    t1 += sequence["t1"].get<long>();
  }
  EXPECT_EQ(client["pool_slots_used"].get<long>(), t1);  // no destination left reserved
}

TEST(PipelinedPlans, AWindowOfOneKeepsOnePlanOfTheClientInFlight) {
  DaemonUnderTest daemon(test_name(), {"--set", "limits.plans_in_flight=1"});
  const auto [run, client] = run_held(daemon);
  ASSERT_EQ(run.exit_code, 0) << run.out << daemon.log();
  EXPECT_EQ(run.number("max_in_flight"), 1);
  EXPECT_GT(run.number("plans"), 2);
  ASSERT_FALSE(client.is_null()) << daemon.log();
  EXPECT_EQ(client["counters"]["plans_acked"].get<double>(), run.number("plans"));
  for (const Json& sequence : client["sequences"]) EXPECT_GT(sequence["t1"].get<long>(), 0) << sequence.dump();
}

}  // namespace
}  // namespace kvtier::testing
