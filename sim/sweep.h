// The sweep experiment: drop rate over capacity factors x modes (x any extra axes).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "router/dispatch_policy.h"
#include "sim/distribute.h"
#include "sim/experiment.h"
#include "sim/progress.h"
#include "sim/sim_config.h"

namespace moe::sim {

struct SweepPoint {
  std::vector<std::pair<std::string, std::string>> axis_values;  // (setting, value) per extra axis
  std::string mode;
  double capacity_factor = 0.0;
  DispatchPolicy policy;  // the policy the point ran: the mode's, the explicit settings, this capacity factor
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

// The points of the sweep `overrides` describes (the settings as given; see build_config), without their
// statistics, in output order: axis values (first axis outermost), mode, capacity factor.
std::vector<SweepPoint> sweep_points(const Overrides& overrides);

// The statistics of points [range.begin, range.end) of sweep_points(overrides), in order. Each axis
// combination the range touches is prepared and streamed once, planning only its points in the range
// (simulate_workload: a policy's statistics do not depend on the other policies of the pass), so any split of
// the points into ranges gives the same statistics as the whole.
std::vector<PointResult> sweep_stats(const Overrides& overrides, PointRange range,
                                     Progress* progress = nullptr);

// The whole sweep: sweep_points with their statistics, spread over the ranks of `comm` when given (every rank
// returns every point; sim/distribute.h).
std::vector<SweepPoint> run_sweep(const Overrides& overrides, bool show_progress,
                                  parallel::Communicator* comm = nullptr);

}  // namespace moe::sim
