#include "sim/quality/command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "moe/layer/moe_layer_config.h"
#include "moe/model/model_weights.h"
#include "moe/model/tokenizer.h"
#include "sim/diverge/command.h"
#include "sim/diverge/corpus.h"
#include "sim/errors.h"
#include "sim/install_paths.h"
#include "sim/parallel.h"
#include "sim/quality/quality.h"
#include "sim/quality/report.h"
#include "sim/quality/scored_text.h"

namespace moe::sim {
namespace {

struct Flags {
  quality::QualityOptions options;
  std::string text, token_file, corpus_dir, model_dir;
  std::vector<std::string> overflows = {"drop", "reroute"};
  std::string kernel = "invariant";
  std::string compute = "fp32";
  int threads = 0;
  bool json = false, quiet = false;
  std::string json_out, csv, svg;
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f) throw DataError("quality: cannot write " + path);
}

void run(Flags& f) {
  quality::QualityOptions& o = f.options;
  if (!f.text.empty() && !f.token_file.empty())
    throw UsageError("quality: give --text or --token-file, not both");
  o.overflows.clear();
  for (const std::string& name : f.overflows) {
    try {
      o.overflows.push_back(parse_overflow(name));
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("quality: --overflows: ") + e.what());
    }
  }
  if (f.kernel != "fast" && f.kernel != "invariant") {
    throw UsageError("quality: --kernel must be fast or invariant (got '" + f.kernel + "')");
  }
  o.kernel = f.kernel == "fast" ? kernels::KernelKind::kFast : kernels::KernelKind::kInvariant;
  try {
    o.compute = MoELayerConfig::parse_compute(f.compute);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("quality: --compute: ") + e.what());
  }
  if (f.threads < 0) throw UsageError("quality: --threads must be >= 0 (0: every core)");
  o.threads = f.threads == 0 ? default_threads() : f.threads;
  o.progress = !f.quiet;

  quality::QualityInput input;
  const bool shipped = f.model_dir.empty();
  const std::filesystem::path dir =
      shipped ? data_dir() / "models" / "kjv-moe" : std::filesystem::path(f.model_dir);
  input.model_label = shipped ? "models/kjv-moe" : f.model_dir;
  input.weights = model::load_pretrained(dir);
  // The settings first (before any text is read), so that an impossible one is named as such.
  o.validate(input.weights->shape.max_positions);
  if (!f.token_file.empty()) {
    input.stream = quality::read_token_file(f.token_file);
    input.text_label = f.token_file;
  } else {
    const model::Tokenizer tokenizer = model::Tokenizer::load(dir);
    if (!f.text.empty()) {
      input.stream = quality::read_text_tokens(f.text, tokenizer);
      input.text_label = f.text;
    } else {
      const std::filesystem::path corpus =
          f.corpus_dir.empty() ? diverge::locate_corpus(std::cerr) : std::filesystem::path(f.corpus_dir);
      if (!std::filesystem::is_regular_file(corpus / "heldout.txt")) {
        throw DataError("quality: " + (corpus / "heldout.txt").string() +
                        " is missing: run scripts/fetch-corpus.sh " + corpus.string() +
                        " (it needs the packages bible-kjv and bible-kjv-text), or leave --corpus out");
      }
      input.stream = quality::read_text_tokens((corpus / "heldout.txt").string(), tokenizer);
      input.text_label = "held-out KJV (heldout.txt)";
    }
  }
  const quality::QualityReport report = quality::run_quality(o, input);
  std::cout << (f.json ? quality::to_json(report) : quality::format_table(report));
  if (!f.json_out.empty()) write_file(f.json_out, quality::to_json(report));
  if (!f.csv.empty()) write_file(f.csv, quality::to_csv(report));
  if (!f.svg.empty()) write_file(f.svg, quality::to_svg(report));
}

}  // namespace

void add_quality_command(CLI::App& app) {
  auto flags = std::make_shared<Flags>();
  auto& o = flags->options;
  CLI::App* cmd = app.add_subcommand(
      "quality",
      "what a capacity factor costs in quality: the trained model's held-out perplexity, top-1 agreement "
      "and KL divergence against dropless, per dispatch mode x capacity factor x overflow, served among "
      "stranger traffic; the smallest capacity factor within 1 % of dropless perplexity (docs/cli.md)");
  cmd->add_option("--text", flags->text, "a text file to score (default: the held-out KJV text)")
      ->type_name("FILE");
  cmd->add_option(
         "--token-file", flags->token_file,
         "token ids to score instead: an int32 .npy array, or decimal ids separated by whitespace or "
         "commas")
      ->type_name("FILE");
  cmd->add_option("--corpus", flags->corpus_dir,
                  "directory with heldout.txt (default: share/moe/kjv or the user's cache, prepared there at "
                  "first use)")
      ->type_name("DIR");
  cmd->add_option("--model-dir", flags->model_dir,
                  "the model's checkpoint directory (default: share/moe/models/kjv-moe beside bin/)")
      ->type_name("DIR");
  cmd->add_option("--max-tokens", o.max_tokens,
                  "predictions to score: an evenly spread sample of the text's windows (0: all of it)")
      ->capture_default_str();
  cmd->add_option("--window", o.window, "tokens per scored window (a request; at most the model's context)")
      ->capture_default_str();
  cmd->add_option("--windows-per-run", o.windows_per_segment,
                  "scored windows per serving run (runs are the unit of parallel work)")
      ->capture_default_str();
  cmd->add_option("--window-interval", o.arrivals.interval, "steps between two scored windows' arrivals")
      ->capture_default_str();
  cmd->add_option("--first-window-step", o.arrivals.first_step,
                  "the step at which a run's first window arrives (strangers before it fill the server)")
      ->capture_default_str();
  cmd->add_option("--modes", o.modes,
                  "dispatch modes, comma-separated (greedy, rank-only, stable, sequence, request, causal); "
                  "dropless is always run")
      ->type_name("LIST")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--overflows", flags->overflows, "overflow policies, comma-separated (drop, reroute)")
      ->type_name("LIST")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--capacity-factors", o.capacity_factors, "capacity factors, comma-separated")
      ->type_name("LIST")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--tolerance", o.tolerance,
                  "the equal-quality comparison: perplexity within this share of dropless")
      ->capture_default_str();
  cmd->add_option("--refine", o.refine,
                  "bisection steps refining each equal-quality factor below the grid's (0: the grid's)")
      ->capture_default_str();
  cmd->add_option("--budget", o.engine.token_budget, "token budget per step (rows)")->capture_default_str();
  cmd->add_option("--chunk", o.engine.chunk_size, "prefill chunk size (0: the budget only)")
      ->capture_default_str();
  add_stranger_traffic_options(*cmd, o.traffic);
  cmd->add_option("--system-prompts", o.traffic.system_prompts,
                  "shared system prompts half the strangers begin with")
      ->capture_default_str();
  cmd->add_option("--kernel", flags->kernel, "kernels of every linear: fast (Eigen) or invariant")
      ->type_name("fast|invariant")
      ->capture_default_str();
  cmd->add_option("--compute", flags->compute, "compute precision of the expert FFNs: fp32 or bf16")
      ->type_name("fp32|bf16")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "the strangers' seed")->capture_default_str();
  cmd->add_option("--threads", flags->threads,
                  "serving runs in parallel (0: every core); the results do not depend on it")
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "print JSON instead of the table");
  cmd->add_option("--json-out", flags->json_out, "also write the JSON report here")->type_name("FILE");
  cmd->add_option("--csv", flags->csv, "also write the points as CSV")->type_name("FILE");
  cmd->add_option("--svg", flags->svg, "also write an SVG plot of perplexity against capacity factor")
      ->type_name("FILE");
  cmd->add_flag("-q,--quiet", flags->quiet, "no progress bar on stderr");
  cmd->callback([flags] { run(*flags); });
}

}  // namespace moe::sim
