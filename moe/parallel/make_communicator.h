// moe/parallel/make_communicator.h: create a communicator by backend name (for tools and tests).
//
// Lives in its own library, moe_parallel_factory, which links whichever backends this build has.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "moe/parallel/communicator.h"

namespace moe::parallel {

struct CommSpec {
  std::string backend = "single";  // "single", "mpi" or "nccl"
  CommOptions options;

  // nccl only.
  int device = 0;               // CUDA device ordinal
  void* cuda_stream = nullptr;  // a cudaStream_t, borrowed; must outlive the communicator
  // If set, the ncclUniqueId is exchanged through this file (rank 0 writes it) and `rank`/`size`
  // below are used; otherwise it is broadcast over MPI_COMM_WORLD (MPI must be built and
  // initialised), and the NCCL communicator owns that MPI communicator.
  std::string nccl_id_file;
  int rank = 0;
  int size = 1;
};

// "mpi" wraps MPI_COMM_WORLD (MPI must be initialised, e.g. by an MpiSession). Collective for
// "mpi" and "nccl". Throws std::invalid_argument for an unknown backend name or one this build
// lacks (the message lists available_backends()), and whatever the backend's constructor throws.
std::unique_ptr<Communicator> make_communicator(const CommSpec& spec);

// The backends compiled into this build, in the order "single", "mpi", "nccl".
std::vector<std::string> available_backends();

}  // namespace moe::parallel
