// The tiering loop through real processes: a toy transformer in kvtier-workload streams real
// attention scores, kvtierd decides tiers and sends plans, libkvtier moves the rows and stages
// T1 per layer. Attention over the tiered cache must equal attention over the full cache.
//
// The exactness tests run on each backend: cpu (host cache, CPU executor) and cuda (device cache,
// CUDA executor); a cuda instance skips with the workload's "no CUDA device: ..." where there is
// no device or no CUDA build.
#include <signal.h>

#include <cctype>
#include <set>
#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "workload_run.hpp"

namespace kvtier::testing {
namespace {

using ::testing::HasSubstr;

std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

// Small window and interval so a 200-step run makes many decisions.
const std::vector<std::string> kBusy = {"--sequences", "2", "--prompt", "32", "--steps", "200",
                                        "--interval", "16", "--window", "16"};

std::vector<std::string> with(std::vector<std::string> extra) {
  std::vector<std::string> args = kBusy;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

const auto kBackends = ::testing::Values("cpu", "cuda");

class ExactAtZeroEviction : public ::testing::TestWithParam<BackendAnd> {};

TEST_P(ExactAtZeroEviction, PositionOrderedStagingIsBitIdenticalToTheFullCache) {
  const auto [backend, beta] = GetParam();
  KVTIER_SKIP_WITHOUT_BACKEND(backend);
  DaemonUnderTest daemon(test_name());
  const WorkloadRun run =
      run_workload(daemon, with({"--backend", backend, "--beta", beta, "--evict", "0", "--expect-exact"}));
  ASSERT_EQ(run.exit_code, 0) << run.out << daemon.log();
  EXPECT_EQ(run.number("steps_compared"), 400);
  EXPECT_EQ(run.number("steps_identical"), 400);
  EXPECT_EQ(run.number("max_abs_diff"), 0);
  EXPECT_EQ(run.number("plans_failed"), 0);
  if (beta != "1.0") {
    // Tokens really moved: offloaded to the pool and restored from it.
    EXPECT_GT(run.number("rows_offloaded"), 0);
    EXPECT_GT(run.number("rows_restored"), 0);
    EXPECT_LT(run.number("peak_t0_tokens"), run.number("full_tokens"));
  } else {
    EXPECT_EQ(run.number("rows_offloaded"), 0);  // β = 1 keeps everything in HBM
  }
}

INSTANTIATE_TEST_SUITE_P(Beta, ExactAtZeroEviction,
                         ::testing::Combine(kBackends, ::testing::Values("0.3", "0.5", "0.7", "1.0")),
                         backend_and_value);

class ExactUnderEveryPolicy : public ::testing::TestWithParam<BackendAnd> {};

// T1 is exact whatever a policy decides to move: only T3 is lossy.
TEST_P(ExactUnderEveryPolicy, TieredOutputsEqualTheFullCacheAtZeroEviction) {
  const auto [backend, policy] = GetParam();
  KVTIER_SKIP_WITHOUT_BACKEND(backend);
  DaemonUnderTest daemon(test_name());
  const WorkloadRun run =
      run_workload(daemon, with({"--backend", backend, "--policy", policy, "--beta", "0.3", "--expect-exact"}));
  ASSERT_EQ(run.exit_code, 0) << run.out << daemon.log();
  EXPECT_GT(run.number("rows_offloaded"), 0);
  EXPECT_EQ(run.number("steps_identical"), run.number("steps_compared"));
  EXPECT_THAT(daemon.ctl({"status", "--json"}).out, ::testing::Not(HasSubstr("\"errors\":1")));
}

INSTANTIATE_TEST_SUITE_P(Policies, ExactUnderEveryPolicy,
                         ::testing::Combine(kBackends, ::testing::Values("paper", "h2o", "streaming_llm", "random",
                                                                         "vase", "r_kv")),
                         backend_and_value);

// The tests of one workload run per backend.
class TieringOnBackend : public ::testing::TestWithParam<std::string> {};

TEST_P(TieringOnBackend, CompactStagingAgreesWithinFloatingPointReorderingTolerance) {
  KVTIER_SKIP_WITHOUT_BACKEND(GetParam());
  DaemonUnderTest daemon(test_name());
  const WorkloadRun run = run_workload(daemon, with({"--backend", GetParam(), "--beta", "0.3", "--order", "compact"}));
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_GT(run.number("rows_offloaded"), 0);
  EXPECT_LT(run.number("max_abs_diff"), 1e-5);
  // Summation order differs, so some steps are not bit-identical.
  EXPECT_LT(run.number("steps_identical"), run.number("steps_compared"));
}

TEST(Tiering, EvictionChangesOutputsMoreAsRGrows) {
  DaemonUnderTest daemon(test_name());
  const WorkloadRun small = run_workload(daemon, with({"--beta", "0.5", "--evict", "0.05"}));
  const WorkloadRun large = run_workload(daemon, with({"--beta", "0.5", "--evict", "0.3"}));
  ASSERT_EQ(small.exit_code, 0) << small.out;
  ASSERT_EQ(large.exit_code, 0) << large.out;
  EXPECT_GT(small.number("max_abs_diff"), 0);
  EXPECT_GT(large.number("max_abs_diff"), small.number("max_abs_diff"));
  EXPECT_LT(large.number("steps_identical"), large.number("steps_compared"));
}

TEST(Tiering, StatusShowsTierCountsPerSequenceChangingOverTime) {
  DaemonUnderTest daemon(test_name());
  const auto log = daemon.dir() / "slow.log";
  ChildProcess client = ChildProcess::spawn(
      {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--name", "slow", "--sequences", "1", "--prompt",
       "32", "--steps", "300", "--interval", "16", "--window", "16", "--beta", "0.3", "--evict", "0.1",
       "--pause-every", "48", "--hold"},
      log);
  auto field = [&](const std::string& json, const std::string& name) -> long {
    const auto at = json.find("\"" + name + "\":");
    return at == std::string::npos ? -1 : std::stol(json.substr(at + name.size() + 3));
  };
  // The workload pauses after every 48th step with that step's decision resolved: the status
  // there is the same on every run. The sequence's tokens spread over T0, T1 and T3 as decisions
  // land, and T0 changes from pause to pause.
  std::set<long> t0_seen;
  bool spread = false;
  for (unsigned step = 48; step < 300; step += 48) {
    ASSERT_TRUE(wait_for_line(log, "paused step=" + std::to_string(step))) << read_log(log);
    const std::string json = daemon.ctl({"status", "--json"}).out;
    t0_seen.insert(field(json, "t0"));
    spread = spread || (field(json, "t1") > 0 && field(json, "t3") > 0);
    client.signal(SIGUSR1);
  }
  ASSERT_TRUE(wait_for_line(log, "holding name=slow")) << read_log(log);
  EXPECT_TRUE(spread);
  EXPECT_GE(t0_seen.size(), 3u);
  const std::string json = daemon.ctl({"status", "--json"}).out;
  EXPECT_GT(field(json, "pool_slots_used"), 0);
  EXPECT_THAT(json, HasSubstr("\"evict_ratio\":0.1"));
  EXPECT_THAT(json, HasSubstr("\"eviction_mode\":\"cumulative\""));
  EXPECT_THAT(daemon.ctl({"status"}).out, HasSubstr("destroyed"));
  client.signal(SIGTERM);
  EXPECT_EQ(client.wait(std::chrono::seconds(20)), 0);
}

TEST_P(TieringOnBackend, APlanReportedAsFailedRollsBackAndOutputsStayExact) {
  KVTIER_SKIP_WITHOUT_BACKEND(GetParam());
  DaemonUnderTest daemon(test_name());
  const WorkloadRun run =
      run_workload(daemon, with({"--backend", GetParam(), "--beta", "0.3", "--fail-every", "3", "--expect-exact"}));
  ASSERT_EQ(run.exit_code, 0) << run.out << daemon.log();
  EXPECT_GT(run.number("plans_rejected"), 0);
  EXPECT_GT(run.number("plans"), 0);
  EXPECT_EQ(run.number("steps_identical"), run.number("steps_compared"));
  EXPECT_THAT(daemon.log(), HasSubstr("event=plan_failed"));
  EXPECT_THAT(daemon.log(), HasSubstr("rolled_back=1"));
}

INSTANTIATE_TEST_SUITE_P(Backends, TieringOnBackend, kBackends,
                         [](const ::testing::TestParamInfo<std::string>& backend) { return backend.param; });

// The cuda instances above must not be skipped for a reason other than a missing device: a build
// and machine that can run them say so here, and one that cannot names why.
TEST(Tiering, TheCudaBackendRunsOrSaysWhyNot) {
  const CommandResult probe = run_command({KVTIER_TEST_WORKLOAD, "--backend", "cuda", "--probe"});
  if (probe.exit_code == 4) {
    EXPECT_THAT(probe.out, HasSubstr("no CUDA device: "));
    GTEST_SKIP() << probe.out;
  }
  EXPECT_EQ(probe.exit_code, 0) << probe.out;
  EXPECT_THAT(probe.out, HasSubstr("backend cuda: "));
}

TEST(Tiering, StatusCountsFailedPlans) {
  DaemonUnderTest daemon(test_name());
  ChildProcess client = ChildProcess::spawn(
      {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--sequences", "1", "--prompt", "32", "--steps",
       "100", "--interval", "16", "--window", "16", "--beta", "0.3", "--fail-every", "2", "--hold"},
      daemon.dir() / "client.log");
  EXPECT_TRUE(eventually([&] {
    const std::string json = daemon.ctl({"status", "--json"}).out;
    return json.find("\"plans_failed\":") != std::string::npos &&
           json.find("\"plans_failed\":0,") == std::string::npos;
  }, std::chrono::seconds(20)));
  client.signal(SIGTERM);
  EXPECT_EQ(client.wait(std::chrono::seconds(20)), 0);
}

TEST(Tiering, AFullPoolKeepsTokensInHbmCountedAndNothingIsLost) {
  DaemonUnderTest daemon(test_name());
  ChildProcess client = ChildProcess::spawn(
      {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--sequences", "2", "--prompt", "32", "--steps",
       "200", "--interval", "16", "--window", "16", "--beta", "0.2", "--pool-tokens", "40", "--expect-exact", "--hold"},
      daemon.dir() / "client.log");
  std::string json;
  EXPECT_TRUE(eventually([&] {
    json = daemon.ctl({"status", "--json"}).out;
    // The pool (40 rows) cannot take every token the policy wants in T1: the rest stays in T0.
    return json.find("\"backpressure_tokens\":0}") == std::string::npos &&
           json.find("\"backpressure_tokens\"") != std::string::npos;
  }, std::chrono::seconds(30))) << json;
  EXPECT_THAT(daemon.log(), HasSubstr("event=pool_full"));
  client.signal(SIGTERM);
  EXPECT_EQ(client.wait(std::chrono::seconds(30)), 0) << run_command({"/bin/cat", (daemon.dir() / "client.log").string()}).out;
}

TEST(Tiering, BadTierParametersAreRefusedNamingTheField) {
  DaemonUnderTest daemon(test_name());
  const WorkloadRun run = run_workload(daemon, with({"--beta", "1.5"}));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.out, HasSubstr("hbm_ratio"));
}

}  // namespace
}  // namespace kvtier::testing
