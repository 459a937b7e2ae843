#include "moe/parallel/make_communicator.h"

#include <stdexcept>

#include "moe/parallel/single_process_communicator.h"
#if MOE_PARALLEL_HAVE_MPI
#include "moe/parallel/mpi_communicator.h"
#endif
#if MOE_PARALLEL_HAVE_NCCL
#include "moe/parallel/nccl_communicator.h"
#endif

namespace moe::parallel {

std::vector<std::string> available_backends() {
  std::vector<std::string> names = {"single"};
#if MOE_PARALLEL_HAVE_MPI
  names.push_back("mpi");
#endif
#if MOE_PARALLEL_HAVE_NCCL
  names.push_back("nccl");
#endif
  return names;
}

std::unique_ptr<Communicator> make_communicator(const CommSpec& spec) {
  validate(spec.options);
  if (spec.backend == "single") return std::make_unique<SingleProcessCommunicator>();
#if MOE_PARALLEL_HAVE_MPI
  if (spec.backend == "mpi") return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, spec.options);
#endif
#if MOE_PARALLEL_HAVE_NCCL
  if (spec.backend == "nccl") {
    NcclConfig config;
    config.device = spec.device;
    config.stream = static_cast<cudaStream_t>(spec.cuda_stream);
    config.options = spec.options;
    if (!spec.nccl_id_file.empty()) {
      return NcclCommunicator::create_from_file(spec.nccl_id_file, spec.rank, spec.size, config);
    }
#if MOE_PARALLEL_HAVE_MPI
    return NcclCommunicator::create(std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, spec.options), config);
#else
    throw std::invalid_argument(
        "make_communicator: nccl needs CommSpec::nccl_id_file in a build without MPI");
#endif
  }
#endif
  std::string names;
  for (const std::string& name : available_backends()) names += (names.empty() ? "" : ", ") + name;
  throw std::invalid_argument("make_communicator: unknown or unavailable backend '" + spec.backend +
                              "'; this build has: " + names);
}

}  // namespace moe::parallel
