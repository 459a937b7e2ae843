// The moe-sim subcommands, callable without the command-line parser (tests call them directly).
#pragma once

#include <ostream>
#include <string_view>

#include "sim/sim_config.h"

namespace moe::parallel {
class Communicator;
}

namespace moe::sim {

// Runs one subcommand with the given settings (as from flags and scenario files), writing its table or JSON
// to `out` and files where the settings ask. Returns the exit status (0). Throws UsageError or DataError.
// With `comm` (the ranks of an MPI job, `mpirun -np N moe-sim ...`), `sweep` and `run` spread their points
// (a sweep's points, a run's --seeds) over the ranks and every rank gets every result; only rank 0 writes
// (`out` and the files); the other commands run in one process and refuse a job of several ranks.
int run_command(Command command, const Overrides& overrides, std::ostream& out,
                parallel::Communicator* comm = nullptr);

// Throws UsageError when a job of `ranks` processes runs `command` (a subcommand's name or alias) that does
// not spread over ranks: every command but run and sweep (and their aliases) needs a job of one.
void require_distributable(std::string_view command, int ranks);

}  // namespace moe::sim
