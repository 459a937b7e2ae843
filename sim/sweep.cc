#include "sim/sweep.h"

#include <algorithm>

#include "sim/errors.h"
#include "sim/text.h"

namespace moe::sim {

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
      axis.name == "csv" || axis.name == "svg") {
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

std::vector<SweepPoint> run_sweep(const Overrides& overrides, bool show_progress) {
  const SimConfig base = build_config(overrides);
  std::vector<SweepAxis> axes;
  for (const auto& a : base.sweep.axes) axes.push_back(parse_axis(a));
  const std::vector<std::string> modes = base.compared_modes();
  const auto& cfs = base.sweep.capacity_factors;

  size_t combos = 1;
  for (const auto& a : axes) combos *= a.values.size();
  std::vector<SweepPoint> points;
  Progress progress("sweep", static_cast<int64_t>(combos * modes.size() * cfs.size()), show_progress);
  std::vector<size_t> index(axes.size(), 0);
  for (size_t c = 0; c < combos; ++c) {
    Overrides with_axes = overrides;
    std::vector<std::pair<std::string, std::string>> values;
    for (size_t a = 0; a < axes.size(); ++a) {
      with_axes[axes[a].name] = axes[a].values[index[a]];
      values.emplace_back(axes[a].name, axes[a].values[index[a]]);
    }
    // Every mode's policy at every cf, over one prepared workload.
    std::vector<SimConfig> per_mode;
    for (const auto& m : modes) {
      Overrides o = with_axes;
      o["mode"] = m;
      per_mode.push_back(build_config(o));
    }
    // One streamed pass plans them all (in lockstep, over the same routed windows).
    std::vector<DispatchPolicy> policies;
    for (size_t m = 0; m < modes.size(); ++m) {
      for (double cf : cfs) {
        policies.push_back(per_mode[m].policy);
        policies.back().capacity_factor = cf;
      }
    }
    const WorkloadRun run = simulate_workload(per_mode.front(), policies);
    size_t next = 0;
    for (size_t m = 0; m < modes.size(); ++m) {
      for (double cf : cfs) {
        SweepPoint p;
        p.axis_values = values;
        p.mode = modes[m];
        p.capacity_factor = cf;
        p.stats = run.stats[next++];
        points.push_back(std::move(p));
        progress.advance();
      }
    }
    for (size_t a = axes.size(); a-- > 0;) {
      if (++index[a] < axes[a].values.size()) break;
      index[a] = 0;
    }
  }
  return points;
}

}  // namespace moe::sim
