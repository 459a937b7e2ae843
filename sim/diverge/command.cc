#include "sim/diverge/command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "moe/layer/moe_layer_config.h"
#include "sim/diverge/corpus.h"
#include "sim/diverge/diverge.h"
#include "sim/diverge/record.h"
#include "sim/install_paths.h"

namespace moe::sim {
namespace {

struct Flags {
  diverge::DivergeOptions options;
  bool json = false;
  bool quiet = false;
  bool no_sweep = false;
  std::string svg_dir;
  std::string json_out;
  std::string model = "kjv";
  std::string model_dir;   // empty: the shipped model, <data_dir>/models/kjv-moe (sim/install_paths.h)
  std::string corpus_dir;  // empty: located or prepared (corpus.h)
  std::string prompt;
  std::string record_dir;
  std::string replot;  // a report's JSON: draw its figures again (with --svg-dir) instead of running
  int64_t record_tokens = 4096;
  int record_window = 256;
  std::vector<std::string> modes;
  std::vector<std::string> kernels = {"fast", "invariant"};
  std::string compute = "fp32";
};

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) throw std::runtime_error("diverge: cannot write " + path.string());
}

void write_plots(const diverge::DivergeReport& report, const std::string& dir) {
  std::filesystem::create_directories(dir);
  if (!report.sweep.empty()) {
    write_file(std::filesystem::path(dir) / "diverge_capacity.svg", diverge::svg_capacity_plot(report));
  }
  if (!report.grid.empty()) {
    write_file(std::filesystem::path(dir) / "diverge_length.svg", diverge::svg_length_plot(report));
  }
}

void run(Flags& f) {
  auto& o = f.options;
  if (f.model == "tiny") {
    o.shape = model::ModelShape::tiny();
  } else if (f.model == "kjv") {
    if (o.weights_path.empty()) {
      if (f.model_dir.empty()) {
        o.model_dir = (data_dir() / "models" / "kjv-moe").string();
        o.model_label = "models/kjv-moe";
      } else {
        o.model_dir = f.model_dir;
      }
      o.corpus_dir = f.corpus_dir.empty() ? diverge::locate_corpus(std::cerr).string() : f.corpus_dir;
    }
  } else if (f.model != "random") {
    throw std::invalid_argument(
        "diverge: --model must be 'kjv' (the trained model), 'random' (d 256, 4 layers) "
        "or 'tiny' (got '" +
        f.model + "')");
  }
  if (!f.prompt.empty()) {
    if (o.model_dir.empty())
      throw std::invalid_argument("diverge: --prompt needs the trained model (--model kjv)");
    const auto& defaults = diverge::default_prompts();
    if (f.prompt.size() == 1 && f.prompt[0] >= '1' &&
        f.prompt[0] < static_cast<char>('1' + defaults.size())) {
      o.prompt = defaults[f.prompt[0] - '1'];
    } else {
      o.prompt = f.prompt;
    }
  } else if (!o.model_dir.empty()) {
    o.prompt = diverge::default_prompts().front();
  }
  if (!f.replot.empty()) {
    if (f.svg_dir.empty()) throw std::invalid_argument("diverge: --replot needs --svg-dir");
    std::ifstream in(f.replot);
    if (!in) throw std::invalid_argument("diverge: cannot read '" + f.replot + "'");
    std::stringstream text;
    text << in.rdbuf();
    write_plots(diverge::report_from_json(text.str()), f.svg_dir);
    return;
  }
  if (!f.record_dir.empty()) {
    if (o.model_dir.empty()) {
      throw std::invalid_argument("diverge: --record-logits needs the trained model (--model kjv)");
    }
    const diverge::LabModel lab = diverge::load_lab_model(o);
    const auto summary = diverge::record_router_logits(lab.weights, lab.heldout, f.record_dir,
                                                       f.record_tokens, f.record_window);
    std::cout << "recorded the router logits of " << summary.tokens << " held-out tokens (" << summary.windows
              << " windows of up to " << f.record_window << ") of " << lab.description << ":\n";
    for (const auto& file : summary.files) std::cout << "  " << file.string() << "\n";
    std::cout << "replay one layer: moe-sim replay --logits " << (summary.files.front()).string()
              << " --meta " << summary.files.back().string() << " --top-k " << lab.weights->shape.top_k
              << " --out plan.csv\n";
    return;
  }
  o.compute = MoELayerConfig::parse_compute(f.compute);
  if (f.no_sweep) o.sweep_capacity_factors.clear();
  if (!f.modes.empty()) {
    o.grid.clear();
    for (const auto& m : f.modes) {
      // "<mode>[-varied][-tokens-key][-sampled][-chat]": the server varied over the trials; the prefix cache
      // keyed by tokens alone; every request sampling at --temperature; the probe a conversation of --turns.
      std::string mode = m;
      auto strip = [&](std::string_view suffix) {
        const bool has = mode.size() > suffix.size() && mode.ends_with(suffix);
        if (has) mode.resize(mode.size() - suffix.size());
        return has;
      };
      const bool chat = strip("-chat");
      if (chat && o.probe_turns < 2) {
        throw std::invalid_argument("diverge: --modes " + m +
                                    " is a conversation of --turns turns, which is " +
                                    std::to_string(o.probe_turns) + " (must be >= 2)");
      }
      const bool sampled = strip("-sampled");
      if (sampled && !(o.temperature > 0)) {
        throw std::invalid_argument("diverge: --modes " + m + " samples at --temperature, which is 0");
      }
      const bool token_keyed = strip("-tokens-key");
      const bool vary = strip("-varied");
      for (const auto& k : f.kernels) {
        if (k != "fast" && k != "invariant") {
          throw std::invalid_argument("diverge: --kernels takes fast and/or invariant (got '" + k + "')");
        }
        o.grid.push_back({mode, k == "fast" ? kernels::KernelKind::kFast : kernels::KernelKind::kInvariant,
                          o.capacity_factor, vary, token_keyed, sampled ? o.temperature : 0.0,
                          chat ? o.probe_turns : 1});
      }
    }
  }
  if (!f.quiet) {
    o.progress = [](const std::string& line) { std::cerr << "  " << line << std::endl; };
  }
  const diverge::DivergeReport report = diverge::run_diverge(o);
  if (f.json) {
    std::cout << diverge::to_json(report);
  } else {
    std::cout << diverge::format_table(report);
    std::cout << diverge::format_completions(report);
  }
  if (!f.json_out.empty()) write_file(f.json_out, diverge::to_json(report));
  if (!f.svg_dir.empty()) write_plots(report, f.svg_dir);
}

}  // namespace

void add_diverge_command(CLI::App& app) {
  auto flags = std::make_shared<Flags>();
  auto& o = flags->options;
  CLI::App* cmd = app.add_subcommand(
      "diverge",
      "Same prompt, different answers: serve one probe N times among seeded stranger traffic on a small MoE "
      "decoder (by default the trained KJV model, share/moe/models/kjv-moe) with continuous batching, per "
      "dispatch "
      "mode and "
      "kernel kind; prints each distinct completion as text (docs/divergence.md)");
  cmd->add_option("-n,--trials", o.trials, "probe runs per configuration")->capture_default_str();
  cmd->add_option("--probe-length", o.probe_length, "probe prompt tokens (random models: random tokens)")
      ->capture_default_str();
  cmd->add_option("--gen-length", o.gen_length, "tokens the probe generates")->capture_default_str();
  cmd->add_option("--budget", o.engine.token_budget, "token budget per step (rows)")->capture_default_str();
  cmd->add_option("--chunk", o.engine.chunk_size, "prefill chunk size")->capture_default_str();
  cmd->add_option("--vary-chunks", o.vary_chunks, "chunk sizes cycled over the trials of */varied configs")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--vary-budgets", o.vary_budgets,
                  "token budgets cycled over the trials of */varied configs (each kept for one chunk cycle)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--cf,--capacity-factor", o.capacity_factor, "capacity factor of the grid")
      ->capture_default_str();
  cmd->add_option("--sweep-cf", o.sweep_capacity_factors, "capacity factors of the sweep (comma separated)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--sweep-modes", o.sweep_modes, "modes of the sweep (always varied)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_flag("--no-sweep", flags->no_sweep, "skip the capacity-factor sweep");
  cmd->add_option("--vary-spec", o.vary_spec,
                  "draft tokens cycled over the trials of */varied configs (0: none)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--vary-cache", o.vary_cache,
                  "vary the prefix cache over the trials of */varied configs (off, on, on after twins)")
      ->capture_default_str();
  cmd->add_option("--vary-preemption", o.vary_preemption,
                  "tight KV pools (preemption) in two of every five trials of */varied configs")
      ->capture_default_str();
  cmd->add_option("--tight-kv-blocks", o.tight_kv_blocks, "KV blocks (16 positions) of a tight trial")
      ->capture_default_str();
  cmd->add_option(
         "--system-prompts", o.traffic.system_prompts,
         "shared system prompts (the probe begins with the first; strangers with one, half the time)")
      ->capture_default_str();
  cmd->add_option(
         "--modes", flags->modes,
         "grid modes (greedy, rank-only, request, stable, sequence, causal, dropless; MODE-varied "
         "varies the server over the trials: chunk sizes, token budgets, speculation, the prefix "
         "cache, preemption; MODE-varied-tokens-key keys the cache by tokens alone; a -sampled suffix "
         "samples at --temperature; a -chat suffix (last) makes the probe a conversation of --turns "
         "turns); default: the full grid")
      ->delimiter(',');
  cmd->add_option("--kernels", flags->kernels, "kernel kinds of a --modes grid")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option(
         "--compute", flags->compute,
         "compute precision of the MoE layers' expert FFNs: fp32, or bf16 (GEMM inputs rounded to bf16, "
         "fp32 accumulation; gates and attention stay fp32)")
      ->capture_default_str();
  cmd->add_option("--temperature", o.temperature,
                  "temperature of the default grid's sampled rows and of --modes MODE-sampled (0: no sampled "
                  "rows); each request draws by (its seed, position)")
      ->capture_default_str();
  cmd->add_option("--top-p", o.top_p, "top-p nucleus of the sampled rows")->capture_default_str();
  cmd->add_option("--turns", o.probe_turns,
                  "turns of the multi-turn probe (the default grid's */N-turn rows and --modes MODE-chat; "
                  "1: no multi-turn rows); its answers share --gen-length")
      ->capture_default_str();
  cmd->add_option("--conversation-share", o.conversation_share,
                  "share of the strangers that go on as conversations in the multi-turn rows")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "traffic and probe seed")->capture_default_str();
  cmd->add_option("--weights-seed", o.weights_seed, "seed of the random weights")->capture_default_str();
  cmd->add_option("--moe-gain", o.init.moe_norm_gain, "random weights: RMSNorm gain before the MoE layers")
      ->capture_default_str();
  cmd->add_option("--weights", o.weights_path,
                  "a moe-model/1 safetensors file or a checkpoint directory instead of the model's weights");
  cmd->add_option(
         "--model", flags->model,
         "kjv: the trained model (--model-dir, its tokenizer, stranger prompts from --corpus); random: "
         "seeded random weights (d 256, 4 layers); tiny: random, d 64, 2 layers")
      ->capture_default_str();
  cmd->add_option("--model-dir", flags->model_dir,
                  "the trained model's checkpoint directory (default: share/moe/models/kjv-moe beside bin/)");
  cmd->add_option("--corpus", flags->corpus_dir,
                  "directory with heldout.txt (scripts/fetch-corpus.sh): stranger prompts of --model kjv "
                  "(default: share/moe/kjv or the user's cache, prepared there at first use)");
  cmd->add_option(
      "--prompt", flags->prompt,
      "the probe's prompt text (--model kjv); 1, 2 or 3 pick a default prompt (1 is the default)");
  cmd->add_option(
      "--record-logits", flags->record_dir,
      "instead of the experiment: write the trained model's router logits on held-out text to DIR "
      "(layer<l>.npy + meta.csv, the files moe-sim replay reads)");
  cmd->add_option("--record-tokens", flags->record_tokens, "held-out tokens to record (0: all)")
      ->capture_default_str();
  cmd->add_option("--record-window", flags->record_window, "tokens per recorded request (window)")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads,
                  "threads the trials run on (0: one per core; the same results for any count)")
      ->capture_default_str();
  add_stranger_traffic_options(*cmd, o.traffic);
  cmd->add_option("--probe-arrival", o.traffic.probe_arrival_step, "step at which the probe arrives")
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "print JSON instead of the table");
  cmd->add_option("--json-out", flags->json_out, "also write the JSON report to this file");
  cmd->add_option(
      "--replot", flags->replot,
      "instead of the experiment: draw the figures of a report written by --json-out (with --svg-dir)");
  cmd->add_option("--svg-dir", flags->svg_dir, "write diverge_capacity.svg and diverge_length.svg here");
  cmd->add_flag("-q,--quiet", flags->quiet, "no progress lines on stderr");
  cmd->callback([flags] { run(*flags); });
}

void add_stranger_traffic_options(CLI::App& cmd, diverge::TrafficConfig& traffic) {
  cmd.add_option("--arrival-rate", traffic.arrival_rate, "stranger arrivals per step (Poisson mean; 0: none)")
      ->capture_default_str();
  cmd.add_option("--fixed-interval", traffic.fixed_interval, "one stranger every K steps instead of Poisson")
      ->capture_default_str();
  cmd.add_option("--prompt-min", traffic.prompt_min, "stranger prompt length min")->capture_default_str();
  cmd.add_option("--prompt-max", traffic.prompt_max, "stranger prompt length max")->capture_default_str();
  cmd.add_option("--decode-min", traffic.decode_min, "stranger generation length min")->capture_default_str();
  cmd.add_option("--decode-max", traffic.decode_max, "stranger generation length max")->capture_default_str();
}

}  // namespace moe::sim
