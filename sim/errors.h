// The two kinds of failure the simulator reports, and the exit status each maps to.
#pragma once

#include <stdexcept>

namespace moe::sim {

// A bad flag, option value or configuration (top_k > num_experts, an unknown mode, ...): exit status 2.
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A missing, unreadable or malformed input file, or data the router rejects: exit status 1.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace moe::sim
