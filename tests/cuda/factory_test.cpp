// make_executor(Backend::kCuda) in a CUDA build: a CUDA executor where a device is usable, else
// kUnavailable saying there is no CUDA device and why. Runs (does not skip) without a device.
#include <gtest/gtest.h>

#include "kvtier/kernels/cuda/device.hpp"
#include "kvtier/kernels/executor.hpp"
#include "kvtier/kernels/executor_factory.hpp"

namespace kvtier::kernels {
namespace {

TEST(CudaFactory, TheCudaBackendIsBuilt) { EXPECT_TRUE(backend_built(Backend::kCuda)); }

TEST(CudaFactory, GivesACudaExecutorWithADeviceAndTheReasonWithoutOne) {
  auto executor = make_executor(Backend::kCuda);
  if (cuda::device_count()) {
    ASSERT_TRUE(executor) << executor.error().message;
    EXPECT_EQ((*executor)->backend(), Backend::kCuda);
  } else {
    ASSERT_FALSE(executor);
    EXPECT_EQ(executor.error().code, Errc::kUnavailable);
    EXPECT_NE(executor.error().message.find("no CUDA device: "), std::string::npos)
        << executor.error().message;
  }
}

}  // namespace
}  // namespace kvtier::kernels
