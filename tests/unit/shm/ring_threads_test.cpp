// Two threads on one ring, many hand-offs, to exercise the memory orders and the sleep/wake
// (Dekker) protocol; meant to run under ThreadSanitizer too. A lost wake-up shows up as a
// hang-guard timeout, never as a timing assertion.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <thread>

#include "kvtier/base/unique_fd.hpp"
#include "kvtier/shm/plan_ring.hpp"
#include "kvtier/shm/score_ring.hpp"
#include "shm_test_support.hpp"

namespace kvtier::shm {
namespace {

using namespace std::chrono_literals;

TEST(ScoreRingThreads, DoorbellProtocolLosesNoWakeup) {
  constexpr std::uint32_t kCapacity = 8;
  constexpr std::uint32_t kRecords = 20000;
  testing::RingBuffer<ScoreRingHeader> ring(score_ring_bytes(kCapacity));
  UniqueFd doorbell(::eventfd(0, EFD_CLOEXEC));
  ASSERT_TRUE(doorbell.valid());

  std::thread client([&] {
    ScoreProducer producer(ring.span(), kCapacity);
    for (std::uint32_t i = 0; i < kRecords; ++i) {
      while (producer.free_slots() == 0) std::this_thread::yield();
      ScoreRecord record{};
      record.step = i;
      if (producer.push(record) == PushResult::kPushedWake) {
        const std::uint64_t one = 1;
        ASSERT_EQ(::write(doorbell.get(), &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
      }
    }
  });

  ScoreConsumer consumer(ring.span(), kCapacity);
  std::array<ScoreRecord, 4> out{};
  std::uint32_t expected = 0;
  bool lost_wakeup = false;
  while (expected < kRecords && !lost_wakeup) {
    auto popped = consumer.pop(out);
    ASSERT_TRUE(popped) << popped.error().message;
    for (std::size_t i = 0; i < *popped; ++i, ++expected) ASSERT_EQ(out[i].step, expected);
    if (*popped != 0 || !consumer.announce_sleep()) continue;
    pollfd poll_fd{doorbell.get(), POLLIN, 0};
    if (::poll(&poll_fd, 1, 30000) != 1) lost_wakeup = true;  // hang guard
    std::uint64_t count = 0;
    if (!lost_wakeup) {
      ASSERT_EQ(::read(doorbell.get(), &count, sizeof(count)), 8);
    }
    consumer.cancel_sleep();
  }
  client.join();
  EXPECT_FALSE(lost_wakeup);
  EXPECT_EQ(expected, kRecords);
}

TEST(ScoreRingThreads, BatchPushesArriveCompleteAndInOrderWithoutLostWakeups) {
  constexpr std::uint32_t kCapacity = 8;
  constexpr std::uint32_t kRecords = 20000;
  constexpr std::uint32_t kBatch = 3;  // does not divide the capacity: batches straddle the wrap
  testing::RingBuffer<ScoreRingHeader> ring(score_ring_bytes(kCapacity));
  UniqueFd doorbell(::eventfd(0, EFD_CLOEXEC));
  ASSERT_TRUE(doorbell.valid());

  std::thread client([&] {
    ScoreProducer producer(ring.span(), kCapacity);
    std::array<ScoreRecord, kBatch> batch{};
    for (std::uint32_t next = 0; next < kRecords;) {
      const std::uint32_t n = std::min(kBatch, kRecords - next);
      while (producer.free_slots() < n) std::this_thread::yield();
      for (std::uint32_t i = 0; i < n; ++i) batch[i].step = next + i;
      const BatchPushResult result = producer.push_batch({batch.data(), n});
      ASSERT_EQ(result.pushed, n);  // room was checked, and only this thread adds records
      if (result.wake) {
        const std::uint64_t one = 1;
        ASSERT_EQ(::write(doorbell.get(), &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
      }
      next += n;
    }
  });

  ScoreConsumer consumer(ring.span(), kCapacity);
  std::array<ScoreRecord, 4> out{};
  std::uint32_t expected = 0;
  bool lost_wakeup = false;
  while (expected < kRecords && !lost_wakeup) {
    auto popped = consumer.pop(out);
    ASSERT_TRUE(popped) << popped.error().message;
    for (std::size_t i = 0; i < *popped; ++i, ++expected) ASSERT_EQ(out[i].step, expected);
    if (*popped != 0 || !consumer.announce_sleep()) continue;
    pollfd poll_fd{doorbell.get(), POLLIN, 0};
    if (::poll(&poll_fd, 1, 30000) != 1) lost_wakeup = true;  // hang guard
    std::uint64_t count = 0;
    if (!lost_wakeup) {
      ASSERT_EQ(::read(doorbell.get(), &count, sizeof(count)), 8);
    }
    consumer.cancel_sleep();
  }
  client.join();
  EXPECT_FALSE(lost_wakeup);
  EXPECT_EQ(expected, kRecords);
}

TEST(PlanRingThreads, FutexWaitLosesNoWakeup) {
  constexpr std::uint32_t kCapacity = 2;
  constexpr std::uint64_t kEpochs = 5000;
  testing::RingBuffer<PlanRingHeader> ring(plan_ring_bytes(kCapacity));

  std::thread daemon([&] {
    PlanProducer producer(ring.span(), kCapacity);
    for (std::uint64_t epoch = 1; epoch <= kEpochs; ++epoch) {
      PlanRecord record{};
      record.epoch = epoch;
      record.flags = kPlanLast;
      while (!producer.push(record)) std::this_thread::yield();
    }
  });

  PlanConsumer consumer(ring.span(), kCapacity);
  std::array<PlanRecord, 2> out{};
  std::uint64_t expected = 1;
  bool lost_wakeup = false;
  while (expected <= kEpochs && !lost_wakeup) {
    if (!consumer.wait(30s)) {  // hang guard
      lost_wakeup = true;
      break;
    }
    auto popped = consumer.pop(out);
    ASSERT_TRUE(popped) << popped.error().message;
    for (std::size_t i = 0; i < *popped; ++i, ++expected) ASSERT_EQ(out[i].epoch, expected);
  }
  daemon.join();
  EXPECT_FALSE(lost_wakeup);
  EXPECT_EQ(expected, kEpochs + 1);
}

}  // namespace
}  // namespace kvtier::shm
