// Shared helpers of the CUDA backend tests: the skip-without-device guard and random bytes.
#pragma once

#include <gtest/gtest.h>

#include "kvtier/kernels/cuda/device.hpp"
#include "random_bytes.hpp"

// Skips the running test with CUDA's reason ("no CUDA device: ...") when no device is usable.
#define KVTIER_SKIP_WITHOUT_CUDA_DEVICE()                                                 \
  do {                                                                                    \
    if (auto kvtier_devices = ::kvtier::kernels::cuda::device_count(); !kvtier_devices) { \
      GTEST_SKIP() << kvtier_devices.error().message;                                     \
    }                                                                                     \
  } while (0)
