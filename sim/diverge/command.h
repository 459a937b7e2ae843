// The `diverge` subcommand of moe-sim (and the standalone moe-diverge).
#pragma once

#include <CLI/CLI.hpp>

#include "sim/diverge/traffic.h"

namespace moe::sim {

// Registers `diverge` on `app` with its flags and a callback that runs the experiment (sim/diverge/diverge.h)
// and prints the table (or JSON with --json), writing SVG plots when --svg-dir is given. Errors in the
// flags or the run are thrown as std::invalid_argument / std::runtime_error from the callback.
void add_diverge_command(CLI::App& app);

// The stranger traffic's flags on `cmd` (`diverge` and `quality`): --arrival-rate, --fixed-interval,
// --prompt-min, --prompt-max, --decode-min, --decode-max, into `traffic`, whose values are the defaults
// shown.
void add_stranger_traffic_options(CLI::App& cmd, diverge::TrafficConfig& traffic);

}  // namespace moe::sim
