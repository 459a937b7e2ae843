// The deployment model's settings (flags and TOML keys of run and sweep), appended to the one table of
// settings (sim/sim_config.h). Each is marked `deployment`: shown in the configuration only when ep-size > 0.
#pragma once

#include <vector>

#include "sim/sim_config.h"

namespace moe::sim::deploy {

// Appends the settings in the order they apply: `hardware` before the figures that override it.
void add_deploy_settings(std::vector<Setting>& settings);

}  // namespace moe::sim::deploy
