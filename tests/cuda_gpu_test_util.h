// Skips a GPU test, naming the reason, when no CUDA device is usable.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "base/cuda/device.h"

#define MOE_REQUIRE_GPU()                                        \
  do {                                                           \
    std::string moe_gpu_why_;                                    \
    if (!::moe::cuda::device_available(&moe_gpu_why_))           \
      GTEST_SKIP() << "no usable CUDA device: " << moe_gpu_why_; \
  } while (0)
