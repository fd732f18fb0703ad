// Clients SIGKILLed at random points of their plan cycles, next to an exact witness that decodes
// throughout (DESIGN.md invariant 7: client death reclaims everything once the process is gone).
// KVTIER_TORTURE_CYCLES sets the number of kills (default 50; scripts/soak-torture runs 1,000).
// Prints the reclaim latency (SIGKILL to the victim's segments gone) as p50/p99; asserts none.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "process.hpp"
#include "workload_run.hpp"

namespace kvtier::testing {
namespace {

std::size_t cycles() {
  const char* text = std::getenv("KVTIER_TORTURE_CYCLES");
  return text != nullptr && std::atoi(text) > 0 ? static_cast<std::size_t>(std::atoi(text)) : 50;
}

TEST(Torture, ClientsKilledAtRandomPointsOfPlanCyclesLeakNothingAndTheWitnessStaysExact) {
  DaemonUnderTest daemon("TortureKills");
  // The witness runs until the test stops it (--hold), tiering every 4 steps.
  ChildProcess witness = ChildProcess::spawn(
      {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--name", "witness", "--sequences", "1", "--steps",
       "1000", "--free-running", "--step-us", "2000", "--beta", "0.25", "--window", "16", "--interval", "4",
       "--expect-exact", "--hold"},
      daemon.dir() / "witness.log");
  ASSERT_TRUE(eventually([&] { return daemon.segments().size() == 2; }));
  const std::size_t witness_segments = daemon.segments().size();

  const unsigned seed = 20261202;
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> delay_us(0, 100'000);
  std::vector<double> reclaim_ms;
  const std::size_t n = cycles();
  for (std::size_t i = 0; i < n; ++i) {
    const std::string name = "victim" + std::to_string(i);
    ChildProcess victim = ChildProcess::spawn(
        {KVTIER_TEST_WORKLOAD, "--socket", daemon.socket().string(), "--name", name, "--steps", "100000",
         "--free-running", "--beta", "0.25", "--window", "16", "--interval", "2", "--int8-pool-tokens", "256",
         "--int8-ratio", "0.3", "--no-shadow", "--audit-every", "0"},
        daemon.dir() / "victim.log");
    ::usleep(static_cast<useconds_t>(delay_us(random)));
    victim.signal(SIGKILL);
    const auto killed = std::chrono::steady_clock::now();
    ASSERT_EQ(victim.wait(std::chrono::seconds(10)), 128 + SIGKILL);
    // Everything the victim held goes back; only the witness's segments stay. Polled every 1 ms
    // so the printed latency is fine-grained; the bound only ends a stuck run.
    ASSERT_TRUE(eventually([&] { return daemon.segments().size() == witness_segments; }, std::chrono::seconds(120),
                           std::chrono::milliseconds(1)))
        << "cycle " << i << ": " << ::testing::PrintToString(daemon.segments());
    reclaim_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - killed).count());
    if ((i + 1) % 100 == 0) std::printf("torture: %zu of %zu kills\n", i + 1, n);
  }
  std::sort(reclaim_ms.begin(), reclaim_ms.end());
  const auto at = [&](double q) { return reclaim_ms[static_cast<std::size_t>(q * static_cast<double>(reclaim_ms.size() - 1))]; };
  std::printf("torture: %zu clients SIGKILLed (seed %u), reclaim latency p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", n,
              seed, at(0.5), at(0.99), reclaim_ms.back());

  ASSERT_TRUE(wait_for_line(daemon.dir() / "witness.log", "holding name=witness"));
  witness.signal(SIGTERM);
  const auto code = witness.wait(std::chrono::seconds(60));
  const WorkloadRun run = workload_result(code.value_or(-1), read_log(daemon.dir() / "witness.log"));
  EXPECT_EQ(run.exit_code, 0) << run.out;  // 0: bit-identical to the full cache, KV audit clean
  EXPECT_GT(run.number("plans"), 0) << run.out;
  EXPECT_TRUE(eventually([&] { return daemon.segments().empty(); }));
}

}  // namespace
}  // namespace kvtier::testing
