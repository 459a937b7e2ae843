// Counts heap allocations made through operator new (every form, the over-aligned ones included), so tests
// can assert that a hot path allocates nothing. Linking support/allocation_counter.cc replaces the global
// operator new/delete of the test program.
#pragma once

namespace moe::testing {

// Number of operator new calls since the program started (all threads).
long allocation_count();

// The largest single operator new request (bytes) since the last reset_largest_allocation() (all threads):
// for tests that a hostile size in a file allocates nothing of that size.
unsigned long largest_allocation();
void reset_largest_allocation();

}  // namespace moe::testing
