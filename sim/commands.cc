#include "sim/commands.h"

#include <fstream>
#include <iostream>

#include "moe/parallel/communicator.h"
#include "sim/deploy/deploy_report.h"
#include "sim/distribute.h"
#include "sim/errors.h"
#include "sim/experiment.h"
#include "sim/probe.h"
#include "sim/replay.h"
#include "sim/report.h"
#include "sim/svg_plot.h"
#include "sim/sweep.h"
#include "sim/text.h"

namespace moe::sim {
namespace {

nlohmann::ordered_json header_json(const SimConfig& config, Command command) {
  nlohmann::ordered_json j;
  j["version"] = MOE_VERSION;
  j["command"] = command_name(command);
  j["config"] = config_json(config, command);
  return j;
}

void merge(nlohmann::ordered_json& into, const nlohmann::ordered_json& from) {
  for (const auto& [key, value] : from.items()) into[key] = value;
}

// The configuration of each run of `run`: one per --seeds value, else the one of --seed.
std::vector<SimConfig> run_configs(const Overrides& overrides, const SimConfig& config) {
  if (config.seeds.empty()) return {config};
  std::vector<SimConfig> configs;
  for (uint64_t seed : config.seeds) {
    Overrides o = overrides;
    o["seed"] = std::to_string(seed);
    configs.push_back(build_config(o));
  }
  return configs;
}

bool writes(const parallel::Communicator* comm) {
  return comm == nullptr || comm->rank() == 0;
}

// --deploy-csv / --deploy-svg without a deployment to write.
void check_deploy_files(const SimConfig& config) {
  if (config.models_deployment()) return;
  for (const std::string* path : {&config.deploy.csv_path, &config.deploy.svg_path}) {
    if (!path->empty()) {
      throw UsageError(std::string(path == &config.deploy.csv_path ? "deploy-csv" : "deploy-svg") +
                       " needs a deployment: set ep-size (or a sweep axis over it)");
    }
  }
}

int cmd_run(const Overrides& overrides, std::ostream& out, parallel::Communicator* comm) {
  const SimConfig config = build_config(overrides);
  check_deploy_files(config);
  const std::vector<SimConfig> configs = run_configs(overrides, config);
  const std::vector<PointResult> runs = compute_points(configs.size(), comm, [&](PointRange range) {
    std::vector<PointResult> mine;
    for (size_t i = range.begin; i < range.end; ++i) {
      const WorkloadRun w = simulate_workload(configs[i], {configs[i].policy},
                                              StreamOptions{.show_progress = !config.quiet && writes(comm)});
      mine.push_back({w.stats.front(), w.num_requests});
    }
    return mine;
  });
  if (!writes(comm)) return 0;
  const bool multi_step = config.workload.token_budget > 0;
  if (config.json) {
    nlohmann::ordered_json j = header_json(config, kRun);
    if (config.seeds.empty()) {
      j["requests"] = runs.front().requests;
      j["policy"] = policy_json(config.mode, config.policy);
      merge(j, run_stats_json(runs.front().stats, multi_step));
    } else {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (size_t i = 0; i < configs.size(); ++i) {
        nlohmann::ordered_json r;
        r["seed"] = configs[i].seed;
        r["requests"] = runs[i].requests;
        r["policy"] = policy_json(configs[i].mode, configs[i].policy);
        merge(r, run_stats_json(runs[i].stats, multi_step));
        list.push_back(r);
      }
      j["runs"] = list;
    }
    out << j.dump(2) << "\n";
  } else {
    out << provenance_line(config, kRun) << "\n";
    std::vector<RunColumn> columns;
    for (size_t i = 0; i < configs.size(); ++i) {
      columns.push_back({config.seeds.empty() ? "value" : "seed=" + std::to_string(configs[i].seed),
                         &runs[i].stats, runs[i].requests});
    }
    print_run_table(out, columns, config.workload.serving_features());
  }
  if (config.deploy.enabled()) {
    std::vector<deploy::DeployColumn> deployment;
    for (size_t i = 0; i < configs.size(); ++i) {
      deployment.push_back({config.seeds.empty() ? "value" : "seed=" + std::to_string(configs[i].seed),
                            &runs[i].stats.deploy});
    }
    if (!config.json) {
      out << "\n";
      deploy::print_deploy_table(out, deployment, config.deploy);
    }
    deploy::write_run_files(config.deploy, provenance_line(config, kRun), deployment);
  }
  return 0;
}

int cmd_sweep(const Overrides& overrides, std::ostream& out, parallel::Communicator* comm) {
  const SimConfig config = build_config(overrides);
  check_deploy_files(config);
  const std::vector<SweepPoint> points = run_sweep(overrides, !config.quiet && writes(comm), comm);
  if (!writes(comm)) return 0;
  const Table table = sweep_table(points, config.workload.serving_features());
  deploy::write_sweep_files(config.deploy, provenance_line(config, kSweep), points);
  if (!config.sweep.csv_path.empty()) {
    std::ofstream csv(config.sweep.csv_path);
    if (!csv) throw DataError("cannot write '" + config.sweep.csv_path + "'");
    csv << provenance_line(config, kSweep) << "\n";
    table.print_csv(csv);
    if (!csv) throw DataError("cannot write '" + config.sweep.csv_path + "'");
  }
  if (!config.sweep.svg_path.empty()) {
    LinePlot plot;
    plot.title = "Drop rate against capacity factor (E=" + std::to_string(config.router.num_experts) +
                 ", k=" + std::to_string(config.router.top_k) + ")";
    plot.x_label = "capacity factor";
    plot.y_label = "drop rate (dropped pairs / pairs)";
    plot.description = provenance_line(config, kSweep).substr(2);
    for (const auto& p : points) {
      const std::string name = p.series();
      if (plot.series.empty() || plot.series.back().name != name)
        plot.series.push_back(PlotSeries{name, {}, {}});
      plot.series.back().x.push_back(p.capacity_factor);
      plot.series.back().y.push_back(p.stats.drop_rate);
    }
    std::ofstream svg(config.sweep.svg_path);
    if (!svg) throw DataError("cannot write '" + config.sweep.svg_path + "'");
    svg << render_svg(plot);
    if (!svg) throw DataError("cannot write '" + config.sweep.svg_path + "'");
  }
  if (config.json) {
    nlohmann::ordered_json j = header_json(config, kSweep);
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& p : points) {
      nlohmann::ordered_json e;
      for (const auto& [name, value] : p.axis_values) e[name] = value;
      e["mode"] = p.mode;
      e["capacity_factor"] = p.capacity_factor;
      e["policy"] = policy_json(p.mode, p.policy);
      merge(e, run_stats_json(p.stats, config.workload.token_budget > 0));
      list.push_back(e);
    }
    j["points"] = list;
    out << j.dump(2) << "\n";
  } else {
    out << provenance_line(config, kSweep) << "\n";
    table.print(out);
  }
  return 0;
}

int cmd_probe(const Overrides& overrides, std::ostream& out) {
  const SimConfig config = build_config(overrides);
  std::vector<SimConfig> per_mode;
  for (const auto& m : config.compared_modes()) {
    Overrides o = overrides;
    o["mode"] = m;
    per_mode.push_back(build_config(o));
  }
  std::vector<ProbeResult> results;
  {
    Progress progress("probe", config.probe.trials, !config.quiet);
    results = run_probe(config, per_mode, &progress);
  }
  if (config.json) {
    nlohmann::ordered_json j = header_json(config, kProbe);
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& r : results) list.push_back(probe_json(r));
    j["results"] = list;
    out << j.dump(2) << "\n";
  } else {
    out << provenance_line(config, kProbe) << "\n";
    probe_table(results).print(out);
  }
  return 0;
}

int cmd_replay(const Overrides& overrides, std::ostream& out) {
  const ReplayResult r = run_replay(build_config(overrides));
  if (r.config.json) {
    nlohmann::ordered_json j = header_json(r.config, kReplay);
    j["requests"] = r.num_requests;
    j["policy"] = policy_json(r.config.mode, r.config.policy);
    merge(j, run_stats_json(r.stats, false));
    out << j.dump(2) << "\n";
  } else {
    out << provenance_line(r.config, kReplay) << "\n";
    print_run_table(out, {{"value", &r.stats, -1}});
  }
  return 0;
}

}  // namespace

void require_distributable(std::string_view command, int ranks) {
  if (ranks <= 1) return;
  for (std::string_view spread : {"run", "simulate", "sweep", "scan"}) {
    if (command == spread) return;
  }
  throw UsageError(std::string(command) +
                   " runs in one process: under mpirun only sweep and run (its --seeds) " +
                   "spread over the ranks");
}

int run_command(Command command, const Overrides& overrides, std::ostream& out,
                parallel::Communicator* comm) {
  require_distributable(command_name(command), comm ? comm->size() : 1);
  switch (command) {
    case kRun:
      return cmd_run(overrides, out, comm);
    case kSweep:
      return cmd_sweep(overrides, out, comm);
    case kProbe:
      return cmd_probe(overrides, out);
    case kReplay:
      return cmd_replay(overrides, out);
    default:
      throw UsageError("unknown command");
  }
}

}  // namespace moe::sim
