// kvtierd with real client processes: handshake, concurrent clients, crash reclaim, the C ABI.
#include <signal.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "process.hpp"

namespace kvtier::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

ChildProcess spawn_workload(const DaemonUnderTest& daemon, const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> argv = {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--name", name};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return ChildProcess::spawn(argv, daemon.dir() / (name + ".log"));
}

bool status_mentions(const DaemonUnderTest& daemon, const std::string& text) {
  return daemon.ctl({"status", "--json"}).out.find(text) != std::string::npos;
}

TEST(Service, VersionCommandNamesClientAndDaemonVersions) {
  DaemonUnderTest daemon(test_name());
  const CommandResult result = daemon.ctl({"version", "--json"});
  EXPECT_EQ(result.exit_code, 0) << result.out;
  EXPECT_THAT(result.out, HasSubstr("\"client\":{\"protocol_major\":1"));
  EXPECT_THAT(result.out, HasSubstr("\"daemon\":{\"version\":\"0.1.0\",\"protocol_major\":1"));
}

TEST(Service, CtlFindsTheDaemonThroughKvtierSocket) {
  DaemonUnderTest daemon(test_name());
  const CommandResult result =
      run_command({"/usr/bin/env", "KVTIER_SOCKET=" + daemon.socket().string(), KVTIER_TEST_KVTIERCTL, "version"});
  EXPECT_EQ(result.exit_code, 0) << result.out;
  EXPECT_THAT(result.out, HasSubstr("daemon  protocol 1.7"));
}

TEST(Service, CtlReportsAnUnreachableDaemonWithExitCode3) {
  const CommandResult result = run_command({KVTIER_TEST_KVTIERCTL, "--socket", "/tmp/kvtier-no-such.sock", "status"});
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_THAT(result.out, HasSubstr("cannot connect to kvtierd at /tmp/kvtier-no-such.sock"));
}

TEST(Service, CtlRefusesUnknownCommandsWithExitCode2) {
  DaemonUnderTest daemon(test_name());
  EXPECT_EQ(daemon.ctl({"frobnicate"}).exit_code, 2);
}

TEST(Service, TwoClientsAreServedAtOnceAndShownWithTheirSequences) {
  DaemonUnderTest daemon(test_name());
  ChildProcess alpha = spawn_workload(daemon, "alpha", {"--sequences", "2", "--steps", "50", "--hold"});
  ChildProcess beta = spawn_workload(daemon, "beta", {"--sequences", "3", "--steps", "50", "--hold"});
  ASSERT_TRUE(eventually([&] {
    const std::string out = daemon.ctl({"status", "--json"}).out;
    // 48-token prompt + 50 steps: every sequence of both clients has reached 98 tokens.
    std::size_t full = 0;
    for (std::size_t at = out.find("\"tokens\":98"); at != std::string::npos; at = out.find("\"tokens\":98", at + 1)) {
      ++full;
    }
    return out.find("\"name\":\"alpha\"") != std::string::npos && out.find("\"name\":\"beta\"") != std::string::npos &&
           full == 5;
  })) << daemon.ctl({"status", "--json"}).out;
  const CommandResult text = daemon.ctl({"status"});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_THAT(text.out, HasSubstr("alpha"));
  EXPECT_THAT(text.out, HasSubstr("2 client(s)"));
  alpha.signal(SIGTERM);
  beta.signal(SIGTERM);
  EXPECT_EQ(alpha.wait(std::chrono::seconds(10)), 0);
  EXPECT_EQ(beta.wait(std::chrono::seconds(10)), 0);
  EXPECT_TRUE(eventually([&] { return !status_mentions(daemon, "\"name\":\"alpha\""); }));
}

TEST(Service, KilledClientIsReclaimedWhileTheOtherKeepsWorking) {
  DaemonUnderTest daemon(test_name());
  ChildProcess victim = spawn_workload(daemon, "victim", {"--steps", "20", "--hold"});
  // The survivor pauses halfway, so the kill lands while it is alive and it decodes on after.
  ChildProcess survivor = spawn_workload(daemon, "survivor", {"--steps", "400", "--pause-every", "200"});
  ASSERT_TRUE(wait_for_line(daemon.dir() / "victim.log", "holding name=victim")) << daemon.log();
  ASSERT_TRUE(wait_for_line(daemon.dir() / "survivor.log", "paused step=200")) << daemon.log();
  // Each engine client holds a control and a pool segment.
  ASSERT_EQ(daemon.segments().size(), 4u);

  victim.signal(SIGKILL);
  EXPECT_EQ(victim.wait(std::chrono::seconds(5)), 128 + SIGKILL);
  EXPECT_TRUE(eventually([&] { return !status_mentions(daemon, "\"name\":\"victim\""); }));
  EXPECT_TRUE(eventually([&] { return daemon.segments().size() == 2; }));
  EXPECT_THAT(daemon.log(), HasSubstr("event=client_reclaimed"));

  survivor.signal(SIGUSR1);
  EXPECT_EQ(survivor.wait(std::chrono::seconds(60)), 0);
  EXPECT_TRUE(eventually([&] { return daemon.segments().empty(); }));
  const std::string json = daemon.ctl({"status", "--json"}).out;
  EXPECT_THAT(json, HasSubstr("\"ddr_bytes_used\":0"));
}

TEST(Service, SigtermDrainsKeepsTheClientsPoolForASuccessorAndRemovesTheSocket) {
  auto daemon = std::make_unique<DaemonUnderTest>(test_name());
  ChildProcess client = spawn_workload(*daemon, "client", {"--hold"});
  ASSERT_TRUE(eventually([&] { return daemon->segments().size() == 2; }));
  daemon->process().signal(SIGTERM);
  EXPECT_EQ(daemon->process().wait(std::chrono::seconds(10)), 0);
  // The control segment goes; the pool stays for a successor to hand back (restart_test.cpp).
  const std::vector<std::string> left = daemon->segments();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_THAT(left[0], HasSubstr(".pool"));
  EXPECT_FALSE(std::filesystem::exists(daemon->socket()));
  EXPECT_THAT(daemon->log(), HasSubstr("event=shutdown"));
  EXPECT_THAT(daemon->log(), HasSubstr("event=drained outstanding_plans=0"));
}

TEST(Service, AnUnsetNodeDdrBudgetIsDerivedFromTheShmFilesystemAndTheMemory) {
  DaemonUnderTest derived(test_name());
  EXPECT_THAT(derived.log(), HasSubstr("event=ddr_budget"));
  EXPECT_THAT(derived.log(), HasSubstr("derived_from=\"/dev/shm "));
  const std::string json = derived.ctl({"status", "--json"}).out;
  EXPECT_EQ(json.find("\"ddr_bytes_total\":0,"), std::string::npos) << json;
  DaemonUnderTest set("SetDdrBudget", {"--set", "pools.ddr_bytes_total=123456789"});
  EXPECT_THAT(set.ctl({"status", "--json"}).out, HasSubstr("\"ddr_bytes_total\":123456789"));
  EXPECT_EQ(set.log().find("event=ddr_budget"), std::string::npos);
}

TEST(Service, CAbiProgramRunsAgainstTheDaemon) {
  DaemonUnderTest daemon(test_name());
  const CommandResult result = run_command({KVTIER_TEST_C_ABI, daemon.socket().string()});
  EXPECT_EQ(result.exit_code, 0) << result.out;
  EXPECT_THAT(result.out, HasSubstr("c_abi_test: ok"));
}

}  // namespace
}  // namespace kvtier::testing
