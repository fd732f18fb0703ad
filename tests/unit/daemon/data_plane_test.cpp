// DataPlane (daemon/src/data_plane.hpp) on its own thread, with real segments: what a stopping
// kvtierd keeps. The data-plane thread runs what is posted to it in order, so "the drain began
// before this client attached" is fixed by the order of the calls, whatever the threads do.
#include "data_plane.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <spdlog/logger.h>

#include "kvtier/shm/control_segment.hpp"
#include "kvtier/shm/pool_segment.hpp"
#include "kvtier/shm/segment.hpp"

namespace kvtier::daemon {
namespace {

constexpr std::uint32_t kClient = 1;
constexpr std::uint64_t kEpoch = 0xd7a1;

std::string segment(shm::SegmentKind kind) {
  auto name = shm::segment_name("dpt" + std::to_string(::getpid()), kClient, kind);
  EXPECT_TRUE(name);
  return *name;
}

// A RegisterModel handled while kvtierd stops attaches its client after DataPlane::drain began:
// that client's pool must keep its name for the successor like every other client's.
TEST(DataPlane, AClientAttachedAfterTheDrainBeganKeepsItsPoolForTheSuccessor) {
  asio::io_context control_io;
  config::DaemonConfig config;
  spdlog::logger log("data_plane_test");
  DataPlane plane(control_io, config, log);
  plane.start([](std::uint32_t, const Error&) {});
  std::optional<std::size_t> outstanding;
  plane.drain(std::chrono::milliseconds(1000), [&](std::size_t n) { outstanding = n; });

  auto layout = shm::ControlLayout::make(64, 8);
  ASSERT_TRUE(layout);
  auto control_segment = shm::create_control_segment(segment(shm::SegmentKind::kControl), *layout, kEpoch, kClient);
  ASSERT_TRUE(control_segment) << control_segment.error().message;
  const int doorbell = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(doorbell, 0);
  plane.attach(kClient, std::move(*control_segment), *layout, UniqueFd(doorbell));
  auto geometry = shm::make_pool_geometry(1, 1, 8, 2, 16);
  ASSERT_TRUE(geometry);
  const std::string pool_name = segment(shm::SegmentKind::kPool);
  auto pool = shm::create_pool_segment(pool_name, *geometry, kEpoch, kClient);
  ASSERT_TRUE(pool) << pool.error().message;
  plane.set_pool(kClient, PoolSetup{std::move(*pool), *geometry, std::nullopt, kernels::KvDtype::kF16, 1});

  auto work = asio::make_work_guard(control_io);  // run_one() waits for the drain's completion
  while (!outstanding) control_io.run_one();
  ASSERT_EQ(outstanding, 0u);
  plane.stop();  // destroys the channel and its segments

  const std::filesystem::path kept = "/dev/shm" + pool_name;
  EXPECT_TRUE(std::filesystem::exists(kept));
  std::filesystem::remove(kept);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + segment(shm::SegmentKind::kControl)));
}

}  // namespace
}  // namespace kvtier::daemon
