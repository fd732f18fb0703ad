// Real two-process tests: the parent plays the daemon (creates the segment), a forked child
// plays the client (maps the inherited fd like one received over SCM_RIGHTS). Children report
// through their exit status and leave with _exit so no parent-owned destructor runs twice.
// Outcomes only, never elapsed time.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <thread>

#include "kvtier/shm/control_segment.hpp"
#include "shm_test_support.hpp"

namespace kvtier::shm {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kEpoch = 5;

struct CrossProcessTest : ::testing::Test {
  void SetUp() override {
    auto made = ControlLayout::make(64, 4);
    ASSERT_TRUE(made);
    layout.emplace(*made);
    auto created = create_control_segment(testing::unique_name(), *layout, kEpoch, 1);
    ASSERT_TRUE(created) << created.error().message;
    segment.emplace(std::move(*created));
  }
  // Runs `body` in a child and returns its pid; body's return value is the exit status.
  template <class Body>
  pid_t spawn(Body body) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(body());
    return pid;
  }
  static int exit_status(pid_t pid) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::optional<ControlLayout> layout;
  std::optional<Segment> segment;
};

TEST_F(CrossProcessTest, ChildProducesAndParentConsumesEveryRecordInOrder) {
  constexpr std::uint32_t kRecords = 20000;  // ~300 laps of a 64-slot ring
  const int fd = segment->fd();
  const pid_t child = spawn([fd] {
    auto mapping = Mapping::map_segment(fd, SegmentKind::kControl, kEpoch);
    if (!mapping) return 2;
    auto rings = client_rings(*mapping);
    if (!rings) return 3;
    for (std::uint32_t i = 0; i < kRecords; ++i) {
      while (rings->scores.free_slots() == 0) ::sched_yield();
      ScoreRecord record{};
      record.step = i;
      record.count = 1;
      record.values[0] = static_cast<float>(i);
      if (rings->scores.push(record) == PushResult::kDropped) return 4;
    }
    return 0;
  });
  ASSERT_GT(child, 0);

  DaemonRings daemon = daemon_rings(*segment, *layout);
  std::array<ScoreRecord, 16> out{};
  std::uint32_t expected = 0;
  const auto give_up = std::chrono::steady_clock::now() + 120s;  // hang guard, not a timing check
  while (expected < kRecords && std::chrono::steady_clock::now() < give_up) {
    auto popped = daemon.scores.pop(out);
    ASSERT_TRUE(popped) << popped.error().message;
    for (std::size_t i = 0; i < *popped; ++i, ++expected) {
      ASSERT_EQ(out[i].step, expected);
      ASSERT_EQ(out[i].values[0], static_cast<float>(expected));
    }
    if (*popped == 0) ::sched_yield();
  }
  EXPECT_EQ(expected, kRecords);
  EXPECT_EQ(exit_status(child), 0);
  EXPECT_EQ(daemon.scores.dropped(), 0u);
}

TEST_F(CrossProcessTest, PlanWaitWakesOnPushFromAnotherProcess) {
  const int fd = segment->fd();
  const pid_t child = spawn([fd] {
    auto mapping = Mapping::map_segment(fd, SegmentKind::kControl, kEpoch);
    if (!mapping) return 2;
    auto rings = client_rings(*mapping);
    if (!rings) return 3;
    if (!rings->plans.wait(60s)) return 4;  // long enough that only a wake-up ends it
    std::array<PlanRecord, 1> out{};
    auto popped = rings->plans.pop(out);
    if (!popped || *popped != 1 || out[0].epoch != 1) return 5;
    rings->plans.ack(1);
    return 0;
  });
  ASSERT_GT(child, 0);
  // Give the child time to go to sleep on the futex (outcome is the same if it has not yet).
  std::this_thread::sleep_for(100ms);
  DaemonRings daemon = daemon_rings(*segment, *layout);
  PlanRecord plan{};
  plan.epoch = 1;
  plan.flags = kPlanLast;
  ASSERT_TRUE(daemon.plans.push(plan));
  EXPECT_EQ(exit_status(child), 0);
  std::array<PlanAck, 2> acks{};
  ASSERT_EQ(daemon.plans.pop_acks(acks).value(), 1u);
  EXPECT_EQ(acks[0].epoch, 1u);
  EXPECT_EQ(acks[0].outcome, static_cast<std::uint32_t>(PlanOutcome::kApplied));
}

TEST_F(CrossProcessTest, PlanWaitTimesOutWhenNothingIsPushed) {
  const int fd = segment->fd();
  const pid_t child = spawn([fd] {
    auto mapping = Mapping::map_segment(fd, SegmentKind::kControl, kEpoch);
    if (!mapping) return 2;
    auto rings = client_rings(*mapping);
    if (!rings) return 3;
    return rings->plans.wait(50ms) ? 4 : 0;
  });
  ASSERT_GT(child, 0);
  EXPECT_EQ(exit_status(child), 0);
}

}  // namespace
}  // namespace kvtier::shm
