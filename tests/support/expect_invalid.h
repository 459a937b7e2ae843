// Asserts that a call is refused with std::invalid_argument whose message names the problem.
#pragma once

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace moe::testing {

// Fails the test unless `fn()` throws std::invalid_argument whose message contains `needle`.
template <typename Fn>
void ExpectInvalid(Fn&& fn, const std::string& needle) {
  try {
    fn();
    FAIL() << "expected std::invalid_argument containing '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace moe::testing
