// driver_error: a failed driver call becomes an Error naming the call and CUDA's reason, with the
// backend's "no CUDA device: " prefix where no driver or device is usable (tests skip on it).
#include "driver_error.hpp"

#include <gtest/gtest.h>

#include <string>

namespace kvtier::kernels::cuda {
namespace {

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

TEST(DriverError, NamesTheCallAndCudasNameAndText) {
  const Error error =
      driver_error("cuMemImportFromShareableHandle", 1, "CUDA_ERROR_INVALID_VALUE", "bad value");
  EXPECT_EQ(error.code, Errc::kUnavailable);
  EXPECT_EQ(error.message, "cuMemImportFromShareableHandle: CUDA_ERROR_INVALID_VALUE: bad value");
}

TEST(DriverError, OutOfMemoryIsALimit) {
  const Error error = driver_error("cuMemCreate", driver_code::kOutOfMemory, "OOM", "no room");
  EXPECT_EQ(error.code, Errc::kLimitExceeded);
  EXPECT_FALSE(starts_with(error.message, "no CUDA device: "));
}

TEST(DriverError, NoDriverOrDeviceCodesSayNoCudaDevice) {
  for (const int code :
       {driver_code::kNotInitialized, driver_code::kDeinitialized, driver_code::kStubLibrary,
        driver_code::kRequiresNewerDriver, driver_code::kNoDevice,
        driver_code::kSystemDriverMismatch, driver_code::kCompatUnsupported}) {
    const Error error = driver_error("cuMemCreate", code, "NAME", "text");
    EXPECT_EQ(error.code, Errc::kUnavailable) << code;
    EXPECT_TRUE(starts_with(error.message, "no CUDA device: cuMemCreate: NAME")) << code;
  }
}

TEST(DriverError, AnUnnamedCodeIsShownAsItsNumber) {
  const Error error = driver_error("cuMemMap", 12345, "", "");
  EXPECT_EQ(error.code, Errc::kUnavailable);
  EXPECT_EQ(error.message, "cuMemMap: CUresult 12345");
}

}  // namespace
}  // namespace kvtier::kernels::cuda
