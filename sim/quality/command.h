// The `quality` subcommand of moe-sim: what a capacity factor costs in quality (sim/quality/quality.h).
#pragma once

#include <CLI/CLI.hpp>

namespace moe::sim {

// Registers `quality` on `app` with its flags and a callback that runs the experiment and prints the table
// (or JSON with --json), writing --json-out, --csv and --svg files. Errors are thrown from the callback:
// UsageError (exit status 2) for impossible settings, DataError (1) for missing or bad files.
void add_quality_command(CLI::App& app);

}  // namespace moe::sim
