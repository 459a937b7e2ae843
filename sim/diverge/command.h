// The `diverge` subcommand of moe-sim (and the standalone moe-diverge).
#pragma once

#include <CLI/CLI.hpp>

namespace moe::sim {

// Registers `diverge` on `app` with its flags and a callback that runs the experiment (sim/diverge/diverge.h)
// and prints the table (or JSON with --json), writing SVG plots when --svg-dir is given. Errors in the
// flags or the run are thrown as std::invalid_argument / std::runtime_error from the callback.
void add_diverge_command(CLI::App& app);

}  // namespace moe::sim
