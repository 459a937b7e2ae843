// The moe-sim subcommands, callable without the command-line parser (tests call them directly).
#pragma once

#include <ostream>

#include "sim/sim_config.h"

namespace moe::sim {

// Runs one subcommand with the given settings (as from flags and scenario files), writing its table or JSON
// to `out` and files where the settings ask. Returns the exit status (0). Throws UsageError or DataError.
int run_command(Command command, const Overrides& overrides, std::ostream& out);

}  // namespace moe::sim
