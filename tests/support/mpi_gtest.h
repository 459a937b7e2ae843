// gtest under mpirun for the MPI test programs: rank 0 keeps gtest's usual output, the other ranks print only
// their failed assertions (with the rank), and every rank exits with the job's result, so mpirun's status
// does not depend on which rank failed. Call after MPI is initialised and InitGoogleTest has run.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace moe::testing {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                   result.file_name() ? result.file_name() : "?", result.line_number(), result.summary());
    }
  }

 private:
  int rank_;
};

// RUN_ALL_TESTS on this rank; returns 1 on every rank when any rank failed, else 0.
inline int RunAllTestsOnEveryRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int failed = RUN_ALL_TESTS();
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any_failed ? 1 : 0;
}

}  // namespace moe::testing
