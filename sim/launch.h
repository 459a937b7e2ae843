// How moe-sim starts under an MPI launcher (`mpirun -np N moe-sim sweep ...`): the plain moe-sim is not
// linked with MPI (its libraries cost about 7 ms of every start-up), so it replaces itself with its MPI
// build, <prefix>/libexec/moe/moe-sim-mpi (the same program with sim/mpi_job.h; sim/install_paths.h), which
// joins the job. Started without a launcher, moe-sim never loads MPI.
#pragma once

#include <string>

namespace moe::sim {

// True when an MPI launcher started this process: its environment names the process's rank (OpenMPI's
// OMPI_COMM_WORLD_RANK, PMIx's PMIX_RANK, PMI's PMI_RANK).
bool launched_by_mpi();

// Replaces this process with the MPI build (same arguments and environment). Returns only when it cannot,
// with the reason (this build has no MPI, or the program is missing).
std::string exec_mpi_build(char** argv);

}  // namespace moe::sim
