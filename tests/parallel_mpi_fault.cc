// Fault-injection program for the MPI communicator, run under mpirun by parallel_mpi_fault_test.sh.
//   parallel_mpi_fault abort   the last rank throws before an all_to_all_v and calls abort() with the
//                          reason; the others are inside the collective. Expect: the job ends at
//                          once, non-zero, with "moe::parallel abort (mpi, rank R of N): ..." on stderr.
//   parallel_mpi_fault exit    the last rank calls std::_Exit(3) without MPI_Finalize; the others are
//                          inside the collective. Expect: the job ends non-zero within a bounded
//                          time, either torn down by mpirun or by the communicator's timeout
//                          ("... a peer is dead or stuck", followed by abort()).
//   parallel_mpi_fault stuck   the last rank stays alive but never enters the collective (it sleeps).
//                          Expect: the others' timeout (5 s) fires, they call abort(), and the job
//                          ends non-zero with "rank R of N waited 5000 ms; a peer is dead or stuck".
// Every rank follows the documented policy: a runtime_error from a collective leads to abort().
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "moe/parallel/mpi_communicator.h"

int main(int argc, char** argv) {
  using namespace moe::parallel;
  MpiSession session(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "abort" && mode != "exit" && mode != "stuck") {
    std::fprintf(stderr, "usage: %s abort|exit|stuck\n", argv[0]);
    return 2;
  }
  CommOptions options;
  options.timeout = std::chrono::seconds(5);
  MpiCommunicator comm(MPI_COMM_WORLD, options);
  const int victim = comm.size() - 1;
  comm.barrier();

  const std::vector<size_t> bytes(comm.size(), 1024);
  std::vector<char> send(1024 * comm.size(), 1), recv(1024 * comm.size());
  try {
    if (comm.rank() == victim) {
      if (mode == "abort") {
        throw std::runtime_error("rank " + std::to_string(victim) +
                                 " failed to load its experts (injected fault)");
      }
      if (mode == "stuck") {
        std::fprintf(stderr, "rank %d is stuck outside the collective (injected fault)\n", victim);
        std::fflush(stderr);
        std::this_thread::sleep_for(std::chrono::seconds(120));
        return 4;
      }
      std::fprintf(stderr, "rank %d exits without MPI_Finalize (injected fault)\n", victim);
      std::fflush(stderr);
      std::_Exit(3);
    }
    comm.all_to_all_v(send.data(), bytes, recv.data(), bytes);
  } catch (const std::exception& e) {
    comm.abort(e.what());
  }
  std::fprintf(stderr, "rank %d: all_to_all_v completed although a peer failed\n", comm.rank());
  return 0;
}
