// The divergence lab: "same prompt, different answers" under continuous batching.
//
// One probe prompt is served N times, each time among independently seeded stranger traffic, for a grid of
// dispatch modes x kernel kinds; each completion is compared with the probe served alone (same config).
// docs/divergence.md describes the experiment and its results.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/linear.h"
#include "moe/model/model_config.h"
#include "moe/model/model_weights.h"
#include "moe/model/tokenizer.h"
#include "sim/diverge/serving.h"
#include "sim/diverge/traffic.h"

namespace moe::sim::diverge {

// One configuration of the grid.
//   mode     a ModelOptions::dispatch_mode name: greedy, rank-only, request, stable, causal, dropless
//   kernel   kFast (Eigen) or kInvariant for every linear of the model
//   varied   the server changes over the trials, as between two deployments, under budget and memory
//            pressure and with what other requests left in its cache: trial i prefills with chunk size
//            vary_chunks[i % C] and a token budget of vary_budgets[(i / C) % B] (C, B: the lists' sizes)
//            instead of the engine's chunk_size and token_budget, speculates with vary_spec[i % S] draft
//            tokens, and (vary_cache) has its prefix cache off, on, on after a twin that continued the
//            probe's system prompt and half its text, or on after a twin that sent the probe's whole prompt
//            ((i / S) % 4), and (vary_preemption) a KV pool of tight_kv_blocks when i % 5 is 1 or 3 (the
//            engine preempts). The probe-alone reference always uses the engine's fixed chunk and budget,
//            no speculation, and no cache unless the probe is a conversation (turns, below). A multi-turn
//            trial's cache is never off (cache mode 0: on, no twin).
//   token_keyed  the prefix cache keys blocks by their tokens alone (an engine unaware of the routing:
//            a request restored from a block takes the routing it holds as its own); else by tokens and
//            prefix_cache_salt of the mode's rule (RoutingState refuses a prefix of another salt)
//   temperature  every request samples at this temperature with DivergeOptions::top_p (sim/diverge/
//            sampling.h); 0: greedy. The probe's seed is the run's (the same alone and in every trial: a user
//            who sends the same seed again), each stranger's from its trial's seed and its id.
//   turns    the probe is a conversation of this many turns (1: a single prompt; sim/diverge/conversation.h):
//            turn 1's prompt is the probe's, each later turn's the whole previous turn, its answer and a
//            message of held-out text (DivergeOptions::probe_turns); its answers share gen_length. The
//            prefix cache is on in every trial and in the probe-alone run (a chat engine's cache serves the
//            previous turns), and a share of the strangers are conversations too
//            (DivergeOptions::conversation_share).
struct ConfigSpec {
  std::string mode = "greedy";
  kernels::KernelKind kernel = kernels::KernelKind::kFast;
  double capacity_factor = 1.0;
  bool varied = false;
  bool token_keyed = false;
  double temperature = 0.0;
  int turns = 1;

  // "greedy/fast", "stable/invariant/varied", "sequence/invariant/varied/tokens-key",
  // "stable/invariant/varied/t=0.7", "stable/invariant/varied/3-turn" ...
  std::string label() const;
};

// A sweep configuration from its name (sweep_modes): invariant kernels, varied, "-tokens-key" a cache keyed
// by tokens alone.
ConfigSpec sweep_spec(const std::string& name, double capacity_factor);

struct DivergeOptions {
  int trials = 30;        // N: probe runs per configuration
  int probe_length = 24;  // prompt tokens of the probe
  int gen_length = 32;    // tokens the probe generates
  // The server's engine of the probe-alone run and of the fixed-server rows (token budget, chunk size; the
  // varied rows change them per trial). Never its prefix cache or speculation: the varied rows set those.
  serving::EngineConfig engine = lab_engine_defaults();
  std::vector<int> vary_chunks = {8, 16, 32};     // chunk sizes of */varied configurations
  std::vector<int> vary_budgets = {32, 64, 128};  // token budgets of */varied configurations
  std::vector<int> vary_spec = {0, 2, 3, 4};      // draft tokens of */varied configurations (0: none)
  bool vary_cache = true;                         // prefix cache and twins in */varied configurations
  bool vary_preemption = true;                    // tight KV pools in */varied configurations
  int tight_kv_blocks = 24;                       // blocks of 16 positions in a tight trial
  int cache_kv_blocks = 2048;                     // blocks when the cache is on and the pool not tight
  double capacity_factor = 1.0;
  // The expert FFNs' compute precision in every configuration (fp32 or bf16; model::ModelOptions::compute).
  kernels::ComputePrecision compute = kernels::ComputePrecision::kF32;
  uint64_t seed = 1;  // traffic of trial i: stream (seed, i); the probe prompt: stream (seed)
  // Threads the trials of every configuration are spread over (0: one per core), one single-threaded Model
  // each; the results are the same for any count.
  int threads = 0;
  TrafficConfig traffic;
  model::ModelShape shape;  // random weights of this shape, unless weights_path is set
  uint64_t weights_seed = 0;
  model::RandomInit init;    // scales of the random weights
  std::string weights_path;  // a moe-model/1 safetensors file or a checkpoint directory (load_model_any)
  // A Hugging Face checkpoint directory (the trained model, models/kjv-moe): its weights (load_pretrained)
  // and its tokenizer.json. Takes precedence over weights_path and the random shape.
  std::string model_dir;
  // How reports name the model (empty: model_dir): the shipped model is "models/kjv-moe" wherever installed.
  std::string model_label;
  // The probe's prompt as text (needs model_dir's tokenizer); empty: probe_length random tokens.
  std::string prompt;
  // A directory with heldout.txt (scripts/fetch-corpus.sh): stranger prompts are windows of its tokens
  // (needs model_dir's tokenizer); empty: uniform random tokens. A missing file is an error naming the
  // script that builds it.
  std::string corpus_dir;
  std::vector<ConfigSpec> grid;  // empty: default_grid()
  // Capacity-factor sweep (invariant kernels, varied serving, one row per mode and factor); empty disables
  // it.
  std::vector<double> sweep_capacity_factors = {0.5, 0.75, 1.0, 1.25, 1.5, 2.0};
  // Modes of the sweep (invariant kernels, varied server); "<mode>-tokens-key" keys the cache by tokens
  // alone.
  std::vector<std::string> sweep_modes = {"greedy", "rank-only",           "request",
                                          "stable", "sequence-tokens-key", "causal"};
  // The sampled rows of the default grid sample at this temperature (0: none) and every sampled row with
  // this top_p (sim/diverge/sampling.h).
  double temperature = 0.7;
  double top_p = 0.95;
  // The multi-turn rows of the default grid: a probe of this many turns (<= 1: none), among strangers of
  // whom this share are conversations (TrafficConfig::conversation_share).
  int probe_turns = 3;
  double conversation_share = 0.25;
  std::function<void(const std::string&)> progress;  // one line per finished configuration (may be empty)

  // Throws std::invalid_argument naming the bad field.
  void validate() const;
  // At capacity_factor: greedy, rank-only, request, stable and dropless with fast and invariant kernels at
  // the engine's fixed chunk and budget; request, stable and causal with invariant kernels, varied; then,
  // when temperature > 0, the sampled rows at it: greedy/fast, request/invariant/varied, stable/invariant,
  // stable/invariant/varied and dropless/fast; then, when probe_turns > 1, the multi-turn rows:
  // greedy/invariant, request/invariant, stable/invariant, stable/invariant/varied and (when temperature > 0)
  // stable/invariant at it.
  std::vector<ConfigSpec> default_grid() const;
  // The largest token budget a configuration uses (the models' workspace size).
  int max_token_budget() const;
};

// One distinct completion of the probe over the trials.
struct Completion {
  std::vector<int32_t> tokens;
  int count = 0;              // trials that gave it
  int first_divergence = -1;  // first generated position differing from the alone run, -1 if it equals it
};

struct ConfigResult {
  ConfigSpec spec;
  std::vector<int32_t> alone;                     // the probe served alone
  std::vector<std::vector<int32_t>> completions;  // per trial
  std::vector<int> first_divergence;              // per trial: first index differing from alone, -1 if none
  std::vector<int> chunk_sizes;                   // per trial
  std::vector<int> token_budgets;                 // per trial
  std::vector<int> spec_tokens;                   // per trial: draft tokens (0: none)
  std::vector<int> cache_modes;                   // per trial: 0 off, 1 on, 2 on + half twin, 3 on + twin
  std::vector<int> kv_blocks;                     // per trial: the KV pool (0: unbounded)
  std::vector<int> probe_cached;                  // per trial: probe positions from the cache (1st admission)
  std::vector<int> probe_preemptions;             // per trial
  std::vector<int> probe_drafted;                 // per trial: draft rows the probe sent
  std::vector<int> probe_accepted;                // per trial: ... accepted
  int distinct = 0;                               // distinct completions among the trials
  std::vector<Completion> distinct_completions;   // by count (descending), then first trial that gave it
  int diverged = 0;                               // trials whose completion differs from alone
  int bitwise_same = 0;                           // trials whose sampled logits equal alone's bit for bit
  int first_divergence_min = -1;                  // over diverged trials (-1 if none)
  double first_divergence_median = -1;
  int64_t probe_steps = 0;            // steps with probe rows, summed over trials
  int64_t probe_steps_with_drop = 0;  // ... in which the probe lost a pair
  int64_t probe_pairs = 0;
  int64_t probe_pairs_dropped = 0;
  int64_t rows = 0;              // rows processed over all trials
  std::vector<int> gen_points;   // generation lengths L (prefixes of the completions)
  std::vector<int> distinct_at;  // distinct completions of length L
  std::vector<int> diverged_at;  // trials differing from alone within the first L tokens
  double seconds = 0;  // the wall time of its items, summed (they run among other configurations' items)

  double lost_step_share() const {
    return probe_steps ? static_cast<double>(probe_steps_with_drop) / probe_steps : 0.0;
  }
  double dropped_pair_share() const {
    return probe_pairs ? static_cast<double>(probe_pairs_dropped) / probe_pairs : 0.0;
  }
  int probe_prompt_length = 0;
  // The probe's prompt positions served from the cache, over the trials (cache hit share; turn 1's).
  double cache_hit_share() const;
  // Per turn of the probe (one entry for a single prompt): its whole prompt length, and the positions its
  // first admission found in the cache, per trial and in the probe-alone run.
  std::vector<int> turn_prompt_lengths;
  std::vector<std::vector<int>> turn_cached;  // [trial][turn]
  std::vector<int> alone_turn_cached;
  // Per turn: its cached positions over its prompt positions, over the trials.
  std::vector<double> turn_hit_shares() const;
  int trials_preempted() const;
  int trials_with_cache_hits() const;
};

// The model a run uses: its weights, and its tokenizer and held-out tokens when options.model_dir is set.
struct LabModel {
  std::shared_ptr<const model::ModelWeights> weights;
  std::shared_ptr<const model::Tokenizer> tokenizer;  // null for random / moe-model/1 weights
  std::vector<int32_t> heldout;                       // corpus_dir's held-out text, tokenized (or empty)
  std::string description;                            // "models/kjv-moe", "random(seed 0)", a file
};

// The default probe prompts of the trained model (`moe-sim diverge --prompt 1|2|3`); the first is the
// default.
const std::vector<std::string>& default_prompts();

struct DivergeReport {
  DivergeOptions options;
  std::string model;                                  // LabModel::description
  std::shared_ptr<const model::Tokenizer> tokenizer;  // for texts (null: token ids)
  std::vector<int32_t> probe_prompt;                  // its whole prompt: the system prompt, then its text
  std::vector<int32_t> probe_system;                  // the system prompt it begins with (may be empty)
  std::vector<std::vector<int32_t>> system_prompts;   // the traffic's
  std::vector<std::vector<int32_t>> probe_messages;   // the multi-turn probe's later messages (may be empty)
  std::vector<ConfigResult> grid;
  std::vector<ConfigResult> sweep;  // capacity-factor sweep
  double seconds = 0;
};

// The weights the options name (random or loaded).
std::shared_ptr<const model::ModelWeights> load_weights(const DivergeOptions& options);
// Weights, tokenizer and held-out tokens. Throws std::runtime_error naming scripts/fetch-corpus.sh when
// corpus_dir lacks heldout.txt, std::invalid_argument for a prompt or corpus without a tokenizer.
LabModel load_lab_model(const DivergeOptions& options);

// Tokens as text: the tokenizer's bytes (printable(): "\n" for a newline), or ids separated by spaces.
std::string tokens_text(const model::Tokenizer* tokenizer, std::span<const int32_t> tokens);

// Runs one configuration: the probe alone, then the N trials. Deterministic for a given (options, spec,
// weights), whatever options.threads is.
// Stranger prompts are windows of `heldout` when it is not empty. A multi-turn spec takes its probe's later
// messages from probe_messages (spec.turns - 1 of them; else std::invalid_argument).
ConfigResult run_config(const ConfigSpec& spec, const DivergeOptions& options,
                        const std::shared_ptr<const model::ModelWeights>& weights,
                        const std::vector<int32_t>& probe_prompt, std::span<const int32_t> heldout = {},
                        const std::vector<std::vector<int32_t>>& system_prompts = {},
                        int probe_system_length = 0,
                        const std::vector<std::vector<int32_t>>& probe_messages = {});

// The whole experiment: the grid, then the sweep.
DivergeReport run_diverge(const DivergeOptions& options);

// Fills distinct / diverged / first divergence / per-length counts from completions and alone.
void summarize(ConfigResult& result, int gen_length);

// Reports.
std::string format_table(const DivergeReport& report);
// Per grid configuration: the alone run's completion and each distinct completion with its count and first
// differing position, as text.
std::string format_completions(const DivergeReport& report);
std::string to_json(const DivergeReport& report);
// The part of a report to_json wrote that the plots read (the options they name, each configuration's spec,
// distinct completions and per-length counts), so that a run's figures can be drawn again from its JSON.
// Throws std::invalid_argument naming what is missing or malformed.
DivergeReport report_from_json(const std::string& json);
// Distinct completions vs capacity factor, one series per mode (from the sweep).
std::string svg_capacity_plot(const DivergeReport& report);
// Distinct completions vs generation length, one series per grid configuration.
std::string svg_length_plot(const DivergeReport& report);

}  // namespace moe::sim::diverge
