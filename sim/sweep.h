// The sweep experiment: drop rate over capacity factors x modes (x any extra axes).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sim/experiment.h"
#include "sim/sim_config.h"

namespace moe::sim {

struct SweepPoint {
  std::vector<std::pair<std::string, std::string>> axis_values;  // (setting, value) per extra axis
  std::string mode;
  double capacity_factor = 0.0;
  RunStats stats;
  // "greedy" or "greedy top-k=2": one plotted line per distinct series.
  std::string series() const;
};

// One parsed axis: a setting name and its values.
struct SweepAxis {
  std::string name;
  std::vector<std::string> values;
};
// Parses "name=v1,v2" (throws UsageError for an unknown setting or an empty list; capacity-factor and mode
// are not axes: use --capacity-factors and --modes).
SweepAxis parse_axis(const std::string& spec);

// Runs the sweep described by `overrides` (the settings as given; see build_config): for each combination of
// axis values, the workload is prepared once, then every mode is planned at every capacity factor.
// Points come in the order axis values (first axis outermost), mode, capacity factor.
std::vector<SweepPoint> run_sweep(const Overrides& overrides, bool show_progress);

}  // namespace moe::sim
