// moe-sim: the command-line front end. Parsing only; the subcommands live in commands.cc.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <sstream>

#ifdef MOE_SIM_HAVE_DIVERGE
#include "sim/diverge/command.h"
#include "sim/quality/command.h"
#endif
#include <map>
#include <string>
#include <vector>

#include "moe/parallel/communicator.h"
#include "sim/commands.h"
#include "sim/errors.h"
#include "sim/fit.h"
#include "sim/inspect/inspect.h"
#include "sim/install_paths.h"
#include "sim/launch.h"
#include "sim/scenario.h"
#include "sim/sim_config.h"
#ifdef MOE_SIM_HAVE_MPI
#include "sim/mpi_job.h"
#endif

namespace {

using moe::sim::Command;

struct SubcommandOptions {
  CLI::App* app = nullptr;
  Command command;
  std::map<std::string, std::string> values;
  std::map<std::string, std::vector<std::string>> repeated;
  std::map<std::string, bool> flags;
  std::map<std::string, CLI::Option*> options;
  std::string scenario;
  CLI::Option* scenario_option = nullptr;
};

void add_settings(SubcommandOptions& sub) {
  for (const moe::sim::Setting& s : moe::sim::settings()) {
    if (!(s.commands & sub.command)) continue;
    const std::string flag = "--" + s.name;
    CLI::Option* o;
    if (s.is_flag) {
      o = sub.app->add_flag(flag, sub.flags[s.name], s.help);
    } else if (s.repeatable) {
      o = sub.app->add_option(flag, sub.repeated[s.name], s.help)->type_name(s.type_name);
    } else {
      o = sub.app->add_option(flag, sub.values[s.name], s.help)->type_name(s.type_name);
    }
    o->group(s.deployment                           ? "Deployment (docs/cli.md)"
             : s.commands == moe::sim::kAllCommands ? "Common"
                                                    : "Options");
    sub.options[s.name] = o;
  }
  sub.scenario_option =
      sub.app->add_option("--scenario", sub.scenario, "TOML scenario file; flags override it")
          ->type_name("FILE")
          ->group("Common");
}

moe::sim::Overrides collect(const SubcommandOptions& sub) {
  moe::sim::Overrides overrides;
  if (sub.scenario_option->count() > 0) {
    overrides = moe::sim::read_scenario(moe::sim::resolve_scenario(sub.scenario));
  }
  for (const auto& [name, option] : sub.options) {
    if (option->count() == 0) continue;
    if (auto f = sub.flags.find(name); f != sub.flags.end()) {
      overrides[name] = f->second ? "true" : "false";
    } else if (auto r = sub.repeated.find(name); r != sub.repeated.end()) {
      std::string joined;
      for (const auto& v : r->second) {
        if (!joined.empty()) joined += ";";
        joined += v;
      }
      overrides[name] = joined;
    } else {
      overrides[name] = sub.values.at(name);
    }
  }
  return overrides;
}

// The ranks of the MPI job this process belongs to, when an MPI launcher started it; `threads` the default
// --threads of a rank (the machine's threads shared by its ranks, at most the CPUs the rank is bound to).
struct Job {
  moe::parallel::Communicator* comm = nullptr;
  int threads = 0;
};

int real_main(int argc, char** argv, const Job& job) {
  CLI::App app{"moe-sim " MOE_VERSION
               ": Mixture-of-Experts router simulator - drop rates, displacement by strangers and\n"
               "divergence for any routing policy. See docs/cli.md.",
               "moe-sim"};
  app.set_version_flag("--version", "moe-sim " MOE_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);
  struct CommandInfo {
    Command command;
    const char* alias;
    const char* help;
  };
  const CommandInfo commands[] = {
      {moe::sim::kRun, "simulate", "one workload under one policy: a summary table (or --json)"},
      {moe::sim::kSweep, "scan", "capacity factors x modes (x --axis ...): table, --csv, --svg plot"},
      {moe::sim::kProbe, "invariance",
       "one probe request co-batched with random strangers: displacement per mode"},
      {moe::sim::kReplay, "plan", "plan real router logits (.npy) and write the plan as CSV"},
  };
  std::vector<SubcommandOptions> subs(4);
  for (size_t i = 0; i < 4; ++i) {
    subs[i].command = commands[i].command;
    subs[i].app = app.add_subcommand(moe::sim::command_name(commands[i].command), commands[i].help);
    subs[i].app->alias(commands[i].alias);
    add_settings(subs[i]);
  }
  // fit: its own options (it plans nothing, so none of the settings apply).
  moe::sim::FitOptions fit;
  CLI::App* fit_app = app.add_subcommand(
      "fit", "estimate the score model from recorded router logits; print it as a scenario file");
  fit_app->add_option("--logits", fit.logits_path, "router logits, float32 [T, E] .npy (as replay reads)")
      ->type_name("FILE")
      ->required();
  fit_app->add_option("--meta", fit.meta_path, "token metadata CSV (request_id,position), as replay reads")
      ->type_name("FILE");
  fit_app->add_option("--out", fit.out_path, "write the scenario here instead of stdout")->type_name("FILE");
  fit_app
      ->add_option("--trace-out", fit.trace_out_path,
                   "also write the recorded requests as a trace; the scenario then runs them as one batch")
      ->type_name("FILE");
  fit_app
      ->add_option("--method", fit.method,
                   "routing (default: match the recorded choice shares and per-request dispersion) or "
                   "moments (logit means and variances only)")
      ->type_name("routing|moments");
  fit_app->add_option("--top-k", fit.top_k, "choices per token the routing calibration matches (default 2)")
      ->type_name("INT");
#ifdef MOE_SIM_HAVE_DIVERGE
  // The divergence lab (sim/diverge): its callback runs the experiment while parsing.
  moe::sim::add_diverge_command(app);
  // What a capacity factor costs in quality (sim/quality), run while parsing too.
  moe::sim::add_quality_command(app);
#endif
  // inspect DIR (sim/inspect): a checkpoint directory's report, printed while parsing.
  const std::shared_ptr<int> inspect_status = moe::sim::add_inspect_command(app);
  if (job.comm != nullptr) {
    // The subcommand, the first word that is not an option: under mpirun only run and sweep spread.
    for (int i = 1; i < argc; ++i) {
      if (argv[i][0] != '-') {
        moe::sim::require_distributable(argv[i], job.comm->size());
        break;
      }
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "moe-sim: error: " << e.what() << "\n(run 'moe-sim --help' or 'moe-sim <command> --help')\n";
    return 2;
  }
  for (const auto& sub : subs) {
    if (!sub.app->parsed()) continue;
    moe::sim::Overrides overrides = collect(sub);
    if (job.threads > 0 && (sub.command & (moe::sim::kRun | moe::sim::kSweep)) &&
        !overrides.count("threads")) {
      overrides["threads"] = std::to_string(job.threads);
    }
    return moe::sim::run_command(sub.command, overrides, std::cout, job.comm);
  }
  if (fit_app->parsed()) return moe::sim::run_fit(fit, std::cout);
  if (app.got_subcommand("diverge")) return 0;
  if (app.got_subcommand("quality")) return 0;
  if (app.got_subcommand("inspect")) return *inspect_status;
  return 2;
}

// Sends std::cout and std::cerr to a buffer that is never printed, until destroyed.
class Silence {
 public:
  Silence() : out_(std::cout.rdbuf(sink_.rdbuf())), err_(std::cerr.rdbuf(sink_.rdbuf())) {}
  ~Silence() {
    std::cout.rdbuf(out_);
    std::cerr.rdbuf(err_);
  }

 private:
  std::ostringstream sink_;
  std::streambuf* out_;
  std::streambuf* err_;
};

}  // namespace

int main(int argc, char** argv) {
  Job job;
#ifdef MOE_SIM_HAVE_MPI
  // Under mpirun: one job of several ranks. Rank 0 speaks (results, help, errors); the others compute in
  // silence (every error reaches rank 0: sim/distribute.h).
  std::unique_ptr<moe::sim::MpiJob> mpi;
  std::unique_ptr<Silence> silence;
  if (moe::sim::launched_by_mpi()) {
    try {
      mpi = std::make_unique<moe::sim::MpiJob>(&argc, &argv);
    } catch (const std::exception& e) {
      std::cerr << "moe-sim: error: MPI: " << e.what() << "\n";
      return 1;
    }
    job = {&mpi->comm(), mpi->threads_per_rank()};
    if (job.comm->rank() != 0) silence = std::make_unique<Silence>();
  }
#else
  // The plain build: under an MPI launcher, become the MPI build (sim/launch.h).
  if (moe::sim::launched_by_mpi()) {
    const std::string why = moe::sim::exec_mpi_build(argv);  // returns only when it cannot
    std::cerr << "moe-sim: error: " << why << "\n";
    return 1;
  }
#endif
  try {
    return real_main(argc, argv, job);
  } catch (const moe::sim::UsageError& e) {
    std::cerr << "moe-sim: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "moe-sim: error: " << e.what() << "\n";
    return 1;
  }
}
