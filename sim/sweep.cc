#include "sim/sweep.h"

#include <algorithm>

#include "sim/errors.h"
#include "sim/text.h"

namespace moe::sim {
namespace {

// The settings of each combination of axis values, in sweep order (first axis outermost), with the values.
struct Combination {
  Overrides overrides;
  std::vector<std::pair<std::string, std::string>> values;
};

std::vector<Combination> combinations(const Overrides& overrides, const SimConfig& base) {
  std::vector<SweepAxis> axes;
  for (const auto& a : base.sweep.axes) axes.push_back(parse_axis(a));
  size_t combos = 1;
  for (const auto& a : axes) combos *= a.values.size();
  std::vector<Combination> out;
  std::vector<size_t> index(axes.size(), 0);
  for (size_t c = 0; c < combos; ++c) {
    Combination combo{overrides, {}};
    for (size_t a = 0; a < axes.size(); ++a) {
      combo.overrides[axes[a].name] = axes[a].values[index[a]];
      combo.values.emplace_back(axes[a].name, axes[a].values[index[a]]);
    }
    out.push_back(std::move(combo));
    for (size_t a = axes.size(); a-- > 0;) {
      if (++index[a] < axes[a].values.size()) break;
      index[a] = 0;
    }
  }
  return out;
}

// Each mode's configuration under one combination of axis values.
std::vector<SimConfig> per_mode_configs(const Overrides& with_axes, const std::vector<std::string>& modes) {
  std::vector<SimConfig> per_mode;
  for (const auto& m : modes) {
    Overrides o = with_axes;
    o["mode"] = m;
    per_mode.push_back(build_config(o));
  }
  return per_mode;
}

}  // namespace

std::string SweepPoint::series() const {
  std::string s = mode;
  for (const auto& [name, value] : axis_values) s += " " + name + "=" + value;
  return s;
}

SweepAxis parse_axis(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos) throw UsageError("--axis '" + spec + "': expected NAME=V1,V2,...");
  SweepAxis axis;
  axis.name = trim(spec.substr(0, eq));
  const Setting* s = find_setting(axis.name);
  if (s == nullptr || s->is_flag || !(s->commands & (kRun | kSweep)) || axis.name == "axis" ||
      axis.name == "scopes" || axis.name == "modes" || axis.name == "capacity-factors" ||
      axis.name == "csv" || axis.name == "svg" || axis.name == "seeds") {
    throw UsageError("--axis '" + spec + "': '" + axis.name + "' is not a setting a sweep can vary");
  }
  if (axis.name == "mode" || axis.name == "capacity-factor") {
    throw UsageError("--axis '" + spec + "': use --" + (axis.name == "mode" ? "modes" : "capacity-factors") +
                     " for this axis");
  }
  // Length distributions contain commas ("uniform:16,256"), so their values are separated by '|'.
  const bool pipe = axis.name == "prompt-len" || axis.name == "decode-len";
  for (const auto& v : split(spec.substr(eq + 1), pipe ? '|' : ',')) {
    if (!v.empty()) axis.values.push_back(v);
  }
  if (axis.values.empty()) throw UsageError("--axis '" + spec + "': no values");
  return axis;
}

std::vector<SweepPoint> sweep_points(const Overrides& overrides) {
  const SimConfig base = build_config(overrides);
  const std::vector<std::string> modes = base.compared_modes();
  std::vector<SweepPoint> points;
  for (const Combination& combo : combinations(overrides, base)) {
    const std::vector<SimConfig> per_mode = per_mode_configs(combo.overrides, modes);
    for (size_t m = 0; m < modes.size(); ++m) {
      for (double cf : base.sweep.capacity_factors) {
        SweepPoint p;
        p.axis_values = combo.values;
        p.mode = modes[m];
        p.capacity_factor = cf;
        p.policy = per_mode[m].policy;
        p.policy.capacity_factor = cf;
        points.push_back(std::move(p));
      }
    }
  }
  return points;
}

std::vector<PointResult> sweep_stats(const Overrides& overrides, PointRange range, Progress* progress) {
  const SimConfig base = build_config(overrides);
  const std::vector<std::string> modes = base.compared_modes();
  const size_t per_combo = modes.size() * base.sweep.capacity_factors.size();
  std::vector<PointResult> stats;
  size_t first = 0;  // the combination's first point
  for (const Combination& combo : combinations(overrides, base)) {
    const size_t begin = std::max(range.begin, first), end = std::min(range.end, first + per_combo);
    if (begin < end) {
      // One streamed pass plans this combination's points of the range (in lockstep, over the same routed
      // windows); every mode's configuration supplies its policy, the first one the workload. The steps are
      // the whole combination's (a prefix cache keyed for every point of it), whatever part of it the range
      // holds.
      const std::vector<SimConfig> per_mode = per_mode_configs(combo.overrides, modes);
      std::vector<DispatchPolicy> all, policies;
      for (size_t i = first; i < first + per_combo; ++i) {
        const size_t m = (i - first) / base.sweep.capacity_factors.size();
        all.push_back(per_mode[m].policy);
        all.back().capacity_factor =
            base.sweep.capacity_factors[(i - first) % base.sweep.capacity_factors.size()];
        if (i >= begin && i < end) policies.push_back(all.back());
      }
      WorkloadRun run = simulate_workload(per_mode.front(), policies, {}, all);
      for (RunStats& s : run.stats) stats.push_back({std::move(s), run.num_requests});
      if (progress) progress->advance(static_cast<int64_t>(end - begin));
    }
    first += per_combo;
  }
  return stats;
}

std::vector<SweepPoint> run_sweep(const Overrides& overrides, bool show_progress,
                                  parallel::Communicator* comm) {
  std::vector<SweepPoint> points = sweep_points(overrides);
  std::vector<PointResult> stats = compute_points(points.size(), comm, [&](PointRange range) {
    Progress progress("sweep", static_cast<int64_t>(range.size()), show_progress);
    return sweep_stats(overrides, range, &progress);
  });
  for (size_t i = 0; i < points.size(); ++i) points[i].stats = std::move(stats[i].stats);
  return points;
}

}  // namespace moe::sim
