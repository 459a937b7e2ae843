// Counts heap allocations made through operator new (every form, the over-aligned ones included), so tests
// can assert that a hot path allocates nothing. Linking support/allocation_counter.cc replaces the global
// operator new/delete of the test program.
#pragma once

namespace moe::testing {

// Number of operator new calls since the program started (all threads).
long allocation_count();

}  // namespace moe::testing
