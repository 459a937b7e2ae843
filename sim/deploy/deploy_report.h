// The deployment's outputs: its configuration and statistics as JSON, the deployment table of a run, the
// sweep table's deployment columns, the per-rank CSV and the SVG plots.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "sim/deploy/deploy_config.h"
#include "sim/deploy/deploy_stats.h"
#include "sim/report.h"
#include "sim/svg_plot.h"

namespace moe::sim::deploy {

// The configuration's "deployment" object: topology, placement policy, a2a, row formats, model shape and
// every hardware figure used.
nlohmann::ordered_json config_json(const DeployConfig& config);

// The statistics' "deployment" object of a run or sweep point: placement (every expert's replicas), steps,
// drops, per-step balance of tokens and pairs over ranks and nodes, bytes per link class (dispatch and
// combine), modelled time and its parts, and per rank its tokens, pairs, bytes sent and GEMM time.
nlohmann::ordered_json stats_json(const DeployStats& stats);

// The deployment table of a run: one column per run (label, stats).
struct DeployColumn {
  std::string label;
  const DeployStats* stats = nullptr;
};
void print_deploy_table(std::ostream& out, const std::vector<DeployColumn>& columns,
                        const DeployConfig& config);

// The sweep table's deployment columns: their header, and one point's cells.
std::vector<std::string> sweep_header();
std::vector<std::string> sweep_cells(const DeployStats& stats);

// Per rank of one run or point: rank, node, experts held, tokens, pairs, bytes sent per link class (dispatch,
// combine), modelled GEMM us, all per accounted step. `lead` columns (a sweep point's axis values, mode, cf)
// come first on every row.
std::vector<std::string> rank_header();
void add_rank_rows(Table& table, const std::vector<std::string>& lead, const DeployStats& stats);

// Modelled step time (us) per accounted step, and its phases' means, of one run or point.
double mean_step_us(const DeployStats& s);

// The files of a run's deployment (config.csv_path: its ranks, a block per column; config.svg_path: pairs
// per rank and step against the rank, a line per column), each starting with `provenance`. Throws
// DataError for a file it cannot write.
void write_run_files(const DeployConfig& config, const std::string& provenance,
                     const std::vector<DeployColumn>& columns);
// The files of a sweep's deployment: config.csv_path, every point's ranks (led by its axis values, mode and
// capacity factor); config.svg_path, the modelled step time against ep-size when that is an axis (a line
// per series and capacity factor), else against the capacity factor (a line per series).
void write_sweep_files(const DeployConfig& config, const std::string& provenance,
                       const std::vector<SweepPoint>& points);

}  // namespace moe::sim::deploy
