// Fault-injection program for expert parallelism, run under mpirun by parallel_mpi_fault_test.sh
// (tests/cmake/parallel.cmake). Every rank builds an ExpertParallelLayer, runs one good step, then:
//   throw     the last rank throws before step 2 and calls abort() with the reason (the documented policy);
//             the others are inside forward(). Expect: the job ends at once, non-zero,
//             "moe::parallel abort (mpi, rank R of N): ...".
//   exit      the last rank calls std::_Exit(3) before step 2. Expect: mpirun tears the job down, or the
//             others' 5 s timeout fires; non-zero, bounded time.
//   stuck     the last rank sleeps instead of calling step 2. Expect: the others' 5 s timeout fires inside
//             forward(), they abort: "... waited 5000 ms; a peer is dead or stuck".
//   mismatch  the last rank builds its layer with another capacity factor. Expect: every rank fails at
//             start-up with "layer config ... differs across ranks ... rank R (...)" and exits 1.
// Every rank follows the policy of moe/parallel/README.md: a runtime_error from a collective leads to
// abort().
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "moe/parallel/expert_parallel_layer.h"
#include "moe/parallel/mpi_communicator.h"
#include "tests/support/ep_fixtures.h"

int main(int argc, char** argv) {
  using namespace moe::parallel;
  MpiSession session(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "throw" && mode != "exit" && mode != "stuck" && mode != "mismatch") {
    std::fprintf(stderr, "usage: %s throw|exit|stuck|mismatch\n", argv[0]);
    return 2;
  }
  CommOptions options;
  options.timeout = std::chrono::seconds(5);
  MpiCommunicator comm(MPI_COMM_WORLD, options);
  const int victim = comm.size() - 1;
  constexpr int64_t kHidden = 32;

  moe::MoELayerConfig config = moe::testing::SmallConfig("deterministic", 8, 2);
  if (mode == "mismatch" && comm.rank() == victim) config.policy.capacity_factor = 1.5;
  auto weights = moe::testing::RandomWeights(moe::testing::SmallShape(kHidden, 48, 8));
  std::unique_ptr<ExpertParallelLayer> layer;
  try {
    layer = std::make_unique<ExpertParallelLayer>(config, weights, comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: start-up failed: %s\n", comm.rank(), e.what());
    return 1;
  }

  const moe::testing::GlobalBatch g = moe::testing::MakeGlobalBatch(3, comm.size(), kHidden);
  const int64_t first = g.offsets[comm.rank()];
  const int rows = static_cast<int>(g.offsets[comm.rank() + 1] - first);
  std::vector<float> y(static_cast<size_t>(rows + 1) * kHidden);
  auto step = [&] {
    layer->forward(g.batch.x.data() + first * kHidden, rows,
                   std::span<const moe::TokenMeta>(g.batch.meta.data() + first, static_cast<size_t>(rows)),
                   y.data());
  };
  try {
    step();
    if (comm.rank() == victim) {
      if (mode == "throw") {
        throw std::runtime_error("rank " + std::to_string(victim) +
                                 " failed while preparing its batch (injected fault)");
      }
      if (mode == "stuck") {
        std::fprintf(stderr, "rank %d is stuck outside forward() (injected fault)\n", victim);
        std::fflush(stderr);
        std::this_thread::sleep_for(std::chrono::seconds(120));
        return 4;
      }
      if (mode == "exit") {
        std::fprintf(stderr, "rank %d exits without MPI_Finalize (injected fault)\n", victim);
        std::fflush(stderr);
        std::_Exit(3);
      }
    }
    step();
  } catch (const std::exception& e) {
    comm.abort(e.what());
  }
  std::fprintf(stderr, "rank %d: step 2 completed although a peer failed\n", comm.rank());
  return 0;
}
