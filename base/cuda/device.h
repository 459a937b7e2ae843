// Whether a usable CUDA device is present, and why not when it is not.
#pragma once

#include <string>

namespace moe::cuda {

// True when cudaGetDeviceCount succeeds with at least one device. Otherwise false, and `why` (if not null)
// receives the reason in words, e.g. "cudaGetDeviceCount failed: cudaErrorInsufficientDriver (CUDA driver
// version is insufficient for CUDA runtime version)". GPU tests skip with this message.
bool device_available(std::string* why = nullptr);

}  // namespace moe::cuda
