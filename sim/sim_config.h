// The simulator's whole configuration, and the one table of settings behind every flag and TOML key.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "router/dispatch_policy.h"
#include "router/router_config.h"
#include "sim/deploy/deploy_config.h"
#include "sim/score_model.h"
#include "sim/workload.h"

namespace moe::sim {

// Subcommands, as a bit mask of where a setting applies.
enum Command : unsigned { kRun = 1, kSweep = 2, kProbe = 4, kReplay = 8, kAllCommands = 15 };
const char* command_name(Command c);

struct SweepOptions {
  std::vector<double> capacity_factors = {0.5, 0.75, 1.0, 1.25, 1.5, 2.0};
  // Extra axes, each "name=v1,v2,..." where name is any setting (top-k, scope, skew, ...).
  std::vector<std::string> axes;
  std::string csv_path;
  std::string svg_path;
};

struct ProbeOptions {
  int trials = 100;
  int probe_len = 128;
  int min_strangers = 1;
  int max_strangers = 16;
  uint64_t probe_id = uint64_t{1} << 31;  // strangers draw ids uniformly from [0, 2^32)
  // "rows": every row of the batch in random order (the probe's own rows too); "requests": each request's
  // rows stay together in position order and the requests come in random order (what a serving engine does).
  std::string shuffle = "rows";
};

struct ReplayOptions {
  std::string logits_path;
  std::string meta_path;
  std::string out_path;
};

struct SimConfig {
  std::string preset;  // empty: the RouterConfig defaults (8 experts, top-2, softmax, renormalised)
  std::string mode = "greedy";
  RouterConfig router;
  DispatchPolicy policy = DispatchPolicy::mode("greedy");
  WorkloadConfig workload;
  ScoreModelConfig scores;
  uint64_t seed = 0;
  // run: one run per seed (--seeds; empty: the one run of `seed`), spread over the ranks of an MPI job.
  std::vector<uint64_t> seeds;
  bool quiet = false;
  int threads = 0;  // workers for scores and routing (0: every hardware thread); changes no result
  bool json = false;
  // Modes compared by sweep and probe; empty = [mode] if --mode was given, else every named mode.
  std::vector<std::string> modes;
  SweepOptions sweep;
  ProbeOptions probe;
  ReplayOptions replay;
  deploy::DeployConfig deploy;  // the deployment accounted (run, sweep; off unless ep-size > 0)
  // Names of the settings given explicitly (flag or scenario file), e.g. "experts".
  std::vector<std::string> explicit_settings;

  bool is_explicit(const std::string& name) const;
  // Whether a deployment is accounted: ep-size > 0, or a sweep axis over ep-size.
  bool models_deployment() const;
  // The modes to compare (see `modes`).
  std::vector<std::string> compared_modes() const;
};

// One setting: its flag (--name) and TOML key (name), where it applies, and how it reads and shows a value.
struct Setting {
  std::string name;
  std::string type_name;  // shown in --help, e.g. "INT" or "greedy|stable|rank-only"
  std::string help;
  unsigned commands = kAllCommands;
  bool is_flag = false;     // a switch without a value on the command line (TOML: true/false)
  bool repeatable = false;  // may be given several times (values joined with ';')
  bool in_config = true;    // recorded in the config line (false for --quiet, --json, --scenario)
  std::function<void(SimConfig&, const std::string&)> apply;
  std::function<std::string(const SimConfig&)> show;
  bool deployment = false;  // a setting of the deployment model: in the config only when ep-size > 0
};

const std::vector<Setting>& settings();
const Setting* find_setting(const std::string& name);

// Settings by name, as text (from flags and scenario files). Later sources overwrite earlier ones.
using Overrides = std::map<std::string, std::string>;

// Builds a configuration: defaults, then the preset (router fields) and the mode (policy fields), then every
// other given setting, so explicit settings override what a preset or mode set. policy.seed follows seed.
// Validates the router, policy, workload and score model. Throws UsageError naming the problem.
SimConfig build_config(const Overrides& overrides);

// "experts=8 top-k=2 ..." over the settings that apply to `command` and are recorded in the config.
std::string config_line(const SimConfig& config, Command command);
// The configuration as JSON: router, policy, workload, score_model, seed and the command's own options.
nlohmann::ordered_json config_json(const SimConfig& config, Command command);

}  // namespace moe::sim
