// The int8 tier (T2) through real processes: kvtierd demotes low-ranked host tokens T1 -> T2
// (quantizing the pool row into the client's int8 pool), libkvtier stages them dequantized and
// restores them T2 -> T0 by dequantizing. kvtier-workload's KV audit (tests/workload/kv_audit.hpp)
// checks every attended row against what the engine wrote: T0/T1 bit-identical, T2 within the
// int8 error bound, no live token missing, T3 exactly the positions the plans evicted; any
// violation makes it exit 6.
//
// The T2 tests run on each backend, like tiering_test.cpp: cpu (host cache, CPU executor, CPU
// dequantize) and cuda (device cache and staging, CUDA executor, GPU dequantize from the pinned
// int8 pool); a cuda instance skips with the workload's "no CUDA device: ..." where there is no
// device or no CUDA build.
#include <signal.h>

#include <cctype>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "workload_run.hpp"

namespace kvtier::testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

// Small window and interval so a 200-step run makes many decisions; β = 0.3 puts most of the
// managed chain in host memory, of which int8_ratio 0.5 goes to T2.
const std::vector<std::string> kInt8 = {"--sequences", "2",    "--prompt",      "32",  "--steps", "200",
                                        "--interval",  "16",   "--window",      "16",  "--beta",  "0.3",
                                        "--int8-ratio", "0.5", "--int8-pool-tokens", "400"};

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& extra) {
  base.insert(base.end(), extra.begin(), extra.end());
  return base;
}

const auto kBackends = ::testing::Values("cpu", "cuda");

void expect_audit_clean(const WorkloadRun& run) {
  EXPECT_GT(run.number("audit_rows"), 0) << run.out;
  EXPECT_EQ(run.number("audit_exact_mismatch"), 0) << run.out;
  EXPECT_EQ(run.number("audit_t2_bound_violations"), 0) << run.out;
  EXPECT_EQ(run.number("audit_tier_mismatch"), 0) << run.out;
  EXPECT_EQ(run.number("lost_tokens"), 0) << run.out;
}

class Int8Staging : public ::testing::TestWithParam<BackendAnd> {};

TEST_P(Int8Staging, DemotedTokensStayWithinTheInt8BoundAndNothingIsLost) {
  const auto [backend, order] = GetParam();
  KVTIER_SKIP_WITHOUT_BACKEND(backend);
  DaemonUnderTest daemon(test_name());
  const WorkloadRun run = run_workload(daemon, with(kInt8, {"--backend", backend, "--order", order}));
  ASSERT_EQ(run.exit_code, 0) << run.out << daemon.log();
  EXPECT_GT(run.number("rows_to_t2"), 0);
  EXPECT_GT(run.number("audit_t2_rows"), 0);
  expect_audit_clean(run);
  EXPECT_EQ(run.number("plans_failed"), 0);
  // Lossy but close: the int8 rows differ from the originals by at most half a quantization
  // step, and the outputs drift from the full cache's by a small, nonzero amount.
  EXPECT_GT(run.number("audit_t2_max_abs_err"), 0);
  EXPECT_LT(run.number("audit_t2_max_abs_err"), 0.05);
  EXPECT_GT(run.number("max_abs_diff"), 0);
  EXPECT_LT(run.number("max_abs_diff"), 0.01);
  EXPECT_LT(run.number("steps_identical"), run.number("steps_compared"));
}

INSTANTIATE_TEST_SUITE_P(Order, Int8Staging,
                         ::testing::Combine(kBackends, ::testing::Values("position", "compact")),
                         backend_and_value);

// The tests of one workload run per backend.
class Int8Tier : public ::testing::TestWithParam<std::string> {};

TEST_P(Int8Tier, StatusShowsT2TokensAndDemotionsOfARunningSequence) {
  KVTIER_SKIP_WITHOUT_BACKEND(GetParam());
  DaemonUnderTest daemon(test_name());
  ChildProcess client = ChildProcess::spawn(
      with({KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--name", "int8"},
           with(kInt8, {"--backend", GetParam(), "--hold"})),
      daemon.dir() / "client.log");
  std::string json;
  EXPECT_TRUE(eventually(
      [&] {
        json = daemon.ctl({"status", "--json"}).out;
        return sum_of(json, "t2") > 0 && sum_of(json, "int8_slots_used") > 0 && sum_of(json, "t2_demotions") > 0;
      },
      std::chrono::seconds(20)))
      << json;
  EXPECT_THAT(json, HasSubstr("\"int8_ratio\":0.5"));
  client.signal(SIGTERM);
  // Exit 0 also means the workload's KV audit passed.
  EXPECT_EQ(client.wait(std::chrono::seconds(20)), 0)
      << run_command({"/bin/cat", (daemon.dir() / "client.log").string()}).out;
}

// The random policy ranks by chance, so tokens already in T2 get evicted too (T2 -> T3).
TEST_P(Int8Tier, EvictionOutOfTheInt8TierDestroysExactlyWhatThePlansSay) {
  KVTIER_SKIP_WITHOUT_BACKEND(GetParam());
  DaemonUnderTest daemon(test_name());
  const WorkloadRun run =
      run_workload(daemon, with(kInt8, {"--backend", GetParam(), "--policy", "random", "--evict", "0.3"}));
  ASSERT_EQ(run.exit_code, 0) << run.out << daemon.log();
  EXPECT_GT(run.number("rows_t2_evicted"), 0);
  EXPECT_GT(run.number("t3_tokens"), run.number("rows_t2_evicted"));
  expect_audit_clean(run);
}

TEST_P(Int8Tier, AnInt8PoolWithoutAnInt8BudgetChangesNothing) {
  KVTIER_SKIP_WITHOUT_BACKEND(GetParam());
  DaemonUnderTest daemon(test_name());
  const WorkloadRun run =
      run_workload(daemon, {"--backend", GetParam(), "--sequences", "2", "--prompt", "32", "--steps", "200",
                            "--interval", "16", "--window", "16", "--beta", "0.3", "--int8-pool-tokens", "400",
                            "--expect-exact"});
  ASSERT_EQ(run.exit_code, 0) << run.out << daemon.log();
  EXPECT_GT(run.number("rows_offloaded"), 0);
  EXPECT_EQ(run.number("rows_to_t2"), 0);
  EXPECT_EQ(run.number("steps_identical"), run.number("steps_compared"));
  expect_audit_clean(run);
}

INSTANTIATE_TEST_SUITE_P(Backends, Int8Tier, kBackends,
                         [](const ::testing::TestParamInfo<std::string>& backend) { return backend.param; });

// A daemon-side refusal at open, before any row moves: the same on every backend (cpu here).
class Int8WithoutPool : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(Int8WithoutPool, OpeningTheSequenceIsRefusedNamingTheMissingPoolAndTheDaemonKeepsServing) {
  DaemonUnderTest daemon(test_name());
  const WorkloadRun refused = run_workload(daemon, with({"--sequences", "1", "--prompt", "32", "--steps", "50"},
                                                        GetParam()));
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("kvtier-workload: open: "));
  EXPECT_THAT(refused.out, AnyOf(HasSubstr("bad_state"), HasSubstr("invalid_argument")));
  EXPECT_THAT(refused.out, HasSubstr("int8 pool"));
  EXPECT_TRUE(refused.summary.empty());
  // The refusal ended nothing but that request: another client runs normally.
  const WorkloadRun next = run_workload(daemon, {"--sequences", "1", "--prompt", "32", "--steps", "100", "--interval",
                                                 "16", "--window", "16", "--beta", "0.3", "--expect-exact"});
  EXPECT_EQ(next.exit_code, 0) << next.out << daemon.log();
  EXPECT_GT(next.number("rows_offloaded"), 0);
  EXPECT_TRUE(daemon.process().running());
}

INSTANTIATE_TEST_SUITE_P(Budget, Int8WithoutPool,
                         ::testing::Values(std::vector<std::string>{"--int8-ratio", "0.5"},
                                           std::vector<std::string>{"--int8-tokens", "16"}));

}  // namespace
}  // namespace kvtier::testing
