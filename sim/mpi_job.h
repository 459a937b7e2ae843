// The MPI job moe-sim-mpi (moe-sim's MPI build, sim/launch.h) runs in when an MPI launcher started it
// (`mpirun -np N moe-sim sweep ...`): `sweep` and `run --seeds` then spread their points over the ranks
// (sim/distribute.h).
#pragma once

#include <chrono>
#include <memory>

#include "moe/parallel/mpi_communicator.h"

namespace moe::sim {

class MpiJob {
 public:
  // The longest a rank waits in a collective for its peers. A rank that finishes its points early waits for
  // the slowest one, which may be hours on a fleet-scale sweep; a dead rank ends the job at once through
  // mpirun.
  static constexpr std::chrono::hours kTimeout{24 * 7};

  // Initialises MPI (parallel::MpiSession) and a communicator over MPI_COMM_WORLD. Throws std::runtime_error
  // when MPI cannot start.
  MpiJob(int* argc, char*** argv);

  parallel::Communicator& comm() { return *comm_; }
  // The threads a rank uses by default: the machine's hardware threads shared by the job's ranks on it, at
  // most the CPUs the launcher bound the rank to.
  int threads_per_rank() const { return threads_per_rank_; }

 private:
  parallel::MpiSession session_;
  std::unique_ptr<parallel::MpiCommunicator> comm_;
  int threads_per_rank_ = 1;
};

}  // namespace moe::sim
