#include "sim/mpi_job.h"

#include <algorithm>
#include <thread>

#include "kernels/cpu/thread_pool.h"

namespace moe::sim {

MpiJob::MpiJob(int* argc, char*** argv) : session_(argc, argv) {
  comm_ = std::make_unique<parallel::MpiCommunicator>(MPI_COMM_WORLD, parallel::CommOptions{kTimeout});
  // The ranks on this machine: those that share memory with this one.
  MPI_Comm node = MPI_COMM_NULL;
  int local = 1;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
  }
  // The machine's threads shared by the ranks on it, and no more than the launcher bound this rank to.
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads_per_rank_ =
      std::max(1, std::min(kernels::ThreadPool::usable_cpus(), hardware / std::max(1, local)));
}

}  // namespace moe::sim
