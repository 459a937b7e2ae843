#include "sim/launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "sim/install_paths.h"

namespace moe::sim {

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

std::string exec_mpi_build(char** argv) {
  const std::filesystem::path mpi = prefix_dir() / "libexec" / "moe" / "moe-sim-mpi";
  std::error_code ec;
  if (!std::filesystem::exists(mpi, ec)) {
    return "started by an MPI launcher, but " + mpi.string() +
           " (moe-sim built with MPI) is missing: this build has no MPI (configure with MOE_ENABLE_MPI=ON "
           "and "
           "libopenmpi-dev), or run moe-sim without mpirun";
  }
  ::execv(mpi.c_str(), argv);
  return "cannot run " + mpi.string() + ": " + std::strerror(errno);
}

}  // namespace moe::sim
