// Reports: aligned text tables, CSV, and JSON renderings of experiment results.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "sim/experiment.h"
#include "sim/probe.h"
#include "sim/sim_config.h"
#include "sim/sweep.h"

namespace moe::sim {

// A text table: a header row and rows of cells; columns are right-aligned except the first.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out) const;
  // CSV: header then rows; cells holding ',' or '"' are quoted.
  void print_csv(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// "# moe-sim <version> <command> <config line>": the first line of every table and CSV.
std::string provenance_line(const SimConfig& config, Command command);

// Fixed-point text for rates and ratios ("0.1234").
std::string fixed(double v, int decimals = 4);

// The policy a point ran, whatever flags produced it - the one writer of it for every JSON point (run, sweep,
// probe, replay, diverge): {"mode", "scope", "priority", "overflow", "capacity_factor", "rounding",
// "min_capacity", "reroute_depth", "renormalize_survivors", "seed", "kernel"}. `kernel` is the expert kernel
// kind ("invariant", "fast") where experts run, null for the routing-only commands.
nlohmann::ordered_json policy_json(std::string_view mode, const DispatchPolicy& policy,
                                   std::optional<std::string_view> kernel = std::nullopt);

// Includes "routing": routing_stats_json(stats.routing).
nlohmann::ordered_json run_stats_json(const RunStats& stats, bool multi_step);
// The router's choices before capacity: expert shares, imbalance, consecutive-token repetition.
nlohmann::ordered_json routing_stats_json(const RoutingStats& r);
nlohmann::ordered_json probe_json(const ProbeResult& r);
// The serving engine's counts of a run (RunStats::engine): the prefix cache's key and hit rate (prompt
// positions served from it at the requests' first admission), preemptions, draft tokens.
nlohmann::ordered_json serving_stats_json(const RunStats& stats);
double cache_hit_rate(const serving::EngineStats& e);
// What the prefix cache's blocks were keyed by (RunStats::cache_rules): "tokens", or their tokens and the
// salt of every rule whose decisions can read the prompt length:
// "tokens+salt(prefix, lookahead 16; sequence: prompt length)".
std::string cache_key_name(const std::vector<RoutingRule>& rules);

// Tables of the experiments. serving: add the serving engine's rows / columns (prefix cache, preemption or
// speculation on). A run's table has a column per run: `label` heads it ("value" for one run,
// "seed=N" for several); num_requests < 0 leaves the requests row out (replay).
struct RunColumn {
  std::string label;
  const RunStats* stats = nullptr;
  int64_t num_requests = -1;
};
void print_run_table(std::ostream& out, const std::vector<RunColumn>& columns, bool serving = false);
Table sweep_table(const std::vector<SweepPoint>& points, bool serving = false);
Table probe_table(const std::vector<ProbeResult>& results);

}  // namespace moe::sim
