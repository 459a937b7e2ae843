#include "sim/diverge/diverge.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "base/splitmix64.h"
#include "moe/model/model.h"
#include "sim/diverge/conversation.h"
#include "sim/report.h"
#include "sim/svg_plot.h"

namespace moe::sim::diverge {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs fn(i) for i in [0, n) on `threads` threads; rethrows the first exception.
template <class F>
void parallel(int n, int threads, F&& fn) {
  std::atomic<int> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (int i = next++; i < n; i = next++) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min(threads, n); ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

int resolved_threads(int threads) {
  return threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

uint64_t trial_seed(uint64_t seed, int trial) {
  return mix64(seed ^ mix64(0x7472ull + trial));
}

// Sampling seeds: the probe's from the run's seed (the same alone and in every trial), a stranger's from its
// trial's seed and its id.
constexpr uint64_t kSamplingTag = 0x73616d706c65ull;  // "sample"
uint64_t probe_sampling_seed(uint64_t seed) {
  return mix64(seed ^ mix64(kSamplingTag));
}
uint64_t stranger_sampling_seed(uint64_t trial_seed, uint64_t id) {
  return mix64(trial_seed ^ mix64(kSamplingTag + 1 + id));
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// The table's last column (hit/turn), right-aligned in 14 characters, and the line's end.
std::string fmt_column(const std::string& text) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), " %14s\n", text.c_str());
  return buf;
}

}  // namespace

ConfigSpec sweep_spec(const std::string& name, double capacity_factor) {
  constexpr std::string_view kTokensKey = "-tokens-key";
  const bool token_keyed = name.size() > kTokensKey.size() && name.ends_with(kTokensKey);
  const std::string mode = token_keyed ? name.substr(0, name.size() - kTokensKey.size()) : name;
  return ConfigSpec{mode, kernels::KernelKind::kInvariant, capacity_factor, true, token_keyed};
}

std::string ConfigSpec::label() const {
  std::string s = mode + "/" + std::string(kernels::to_string(kernel));
  if (varied) s += "/varied";
  if (token_keyed) s += "/tokens-key";
  if (temperature > 0) s += "/t=" + fmt("%g", temperature);
  if (turns > 1) s += "/" + std::to_string(turns) + "-turn";
  return s;
}

double ConfigResult::cache_hit_share() const {
  int64_t cached = 0;
  for (int c : probe_cached) cached += c;
  const int64_t total = static_cast<int64_t>(probe_cached.size()) * probe_prompt_length;
  return total > 0 ? static_cast<double>(cached) / static_cast<double>(total) : 0.0;
}

std::vector<double> ConfigResult::turn_hit_shares() const {
  std::vector<double> shares;
  for (size_t t = 0; t < turn_prompt_lengths.size(); ++t) {
    int64_t cached = 0;
    for (const std::vector<int>& trial : turn_cached) cached += trial.at(t);
    const int64_t total = static_cast<int64_t>(turn_cached.size()) * turn_prompt_lengths[t];
    shares.push_back(total > 0 ? static_cast<double>(cached) / static_cast<double>(total) : 0.0);
  }
  return shares;
}

int ConfigResult::trials_preempted() const {
  return static_cast<int>(
      std::count_if(probe_preemptions.begin(), probe_preemptions.end(), [](int p) { return p > 0; }));
}

int ConfigResult::trials_with_cache_hits() const {
  return static_cast<int>(
      std::count_if(probe_cached.begin(), probe_cached.end(), [](int c) { return c > 0; }));
}

void DivergeOptions::validate() const {
  auto check = [](bool ok, const std::string& m) {
    if (!ok) throw std::invalid_argument("diverge: " + m);
  };
  check(trials >= 1, "trials (" + std::to_string(trials) + ") must be >= 1");
  check(probe_length >= 1, "probe length (" + std::to_string(probe_length) + ") must be >= 1");
  check(gen_length >= 1, "generation length (" + std::to_string(gen_length) + ") must be >= 1");
  check(threads >= 0, "threads (" + std::to_string(threads) + ") must be >= 0 (0: one per core)");
  check(capacity_factor > 0, "capacity factor (" + std::to_string(capacity_factor) + ") must be > 0");
  check(!vary_chunks.empty(), "the list of varied chunk sizes is empty");
  for (int c : vary_chunks) check(c >= 1, "chunk size (" + std::to_string(c) + ") must be >= 1");
  check(!vary_budgets.empty(), "the list of varied token budgets is empty");
  for (int b : vary_budgets) check(b >= 1, "token budget (" + std::to_string(b) + ") must be >= 1");
  check(!vary_spec.empty(), "the list of varied draft-token counts is empty");
  for (int d : vary_spec) check(d >= 0, "draft tokens (" + std::to_string(d) + ") must be >= 0");
  check(tight_kv_blocks >= 1, "tight_kv_blocks (" + std::to_string(tight_kv_blocks) + ") must be >= 1");
  check(cache_kv_blocks >= 1, "cache_kv_blocks (" + std::to_string(cache_kv_blocks) + ") must be >= 1");
  for (double cf : sweep_capacity_factors)
    check(cf > 0, "sweep capacity factor (" + std::to_string(cf) + ") must be > 0");
  for (const auto& m : sweep_modes) model::ModelOptions::dispatch_mode(sweep_spec(m, 1.0).mode, 1.0);
  check(conversation_share >= 0 && conversation_share <= 1,
        "conversation share (" + std::to_string(conversation_share) + ") must be in [0, 1]");
  if (probe_turns > 1) split_answers(gen_length, probe_turns);
  for (const auto& g : grid) {
    model::ModelOptions::dispatch_mode(g.mode, g.capacity_factor);
    Sampling{g.temperature, top_p, 0}.validate();
    check(g.turns >= 1, g.label() + ": turns (" + std::to_string(g.turns) + ") must be >= 1");
    split_answers(gen_length, g.turns);
  }
  Sampling{temperature, top_p, 0}.validate();
  check(engine.chunk_size > 0, "chunk size (" + std::to_string(engine.chunk_size) +
                                   ") must be positive (the lab's server always chunks its prefill)");
  engine.validate();
  traffic.validate();
  if (weights_path.empty()) shape.validate();
}

std::vector<ConfigSpec> DivergeOptions::default_grid() const {
  using kernels::KernelKind;
  std::vector<ConfigSpec> g;
  auto both = [&](const std::string& mode, bool vary) {
    for (KernelKind k : {KernelKind::kFast, KernelKind::kInvariant})
      g.push_back({mode, k, capacity_factor, vary});
  };
  both("greedy", false);
  g.push_back({"greedy", KernelKind::kInvariant, capacity_factor, true});
  both("rank-only", false);
  both("request", false);
  g.push_back({"request", KernelKind::kInvariant, capacity_factor, true});
  both("stable", false);
  g.push_back({"stable", KernelKind::kInvariant, capacity_factor, true});
  // The bug prefix scope fixes: sequence scope under a cache keyed by tokens alone.
  g.push_back({"sequence", KernelKind::kInvariant, capacity_factor, true, true});
  g.push_back({"causal", KernelKind::kInvariant, capacity_factor, true});
  both("dropless", false);
  // Sampled: the production default, the counter-check, the deterministic preset (fixed and varied server)
  // and the kernels alone.
  if (temperature > 0) {
    const double t = temperature;
    g.push_back({"greedy", KernelKind::kFast, capacity_factor, false, false, t});
    g.push_back({"request", KernelKind::kInvariant, capacity_factor, true, false, t});
    g.push_back({"stable", KernelKind::kInvariant, capacity_factor, false, false, t});
    g.push_back({"stable", KernelKind::kInvariant, capacity_factor, true, false, t});
    g.push_back({"dropless", KernelKind::kFast, capacity_factor, false, false, t});
  }
  // Multi-turn: the production default and the counter-check, the deterministic preset (fixed and varied
  // server, and sampled). Only one varied row: a varied multi-turn trial costs about 4 single-turn ones (the
  // conversation in a tight KV pool is preempted again and again).
  if (probe_turns > 1) {
    const int n = probe_turns;
    g.push_back({"greedy", KernelKind::kInvariant, capacity_factor, false, false, 0.0, n});
    g.push_back({"request", KernelKind::kInvariant, capacity_factor, false, false, 0.0, n});
    g.push_back({"stable", KernelKind::kInvariant, capacity_factor, false, false, 0.0, n});
    g.push_back({"stable", KernelKind::kInvariant, capacity_factor, true, false, 0.0, n});
    if (temperature > 0)
      g.push_back({"stable", KernelKind::kInvariant, capacity_factor, false, false, temperature, n});
  }
  return g;
}

int DivergeOptions::max_token_budget() const {
  int budget = engine.token_budget;
  for (int b : vary_budgets) budget = std::max(budget, b);
  return budget;
}

std::shared_ptr<const model::ModelWeights> load_weights(const DivergeOptions& options) {
  if (!options.model_dir.empty()) return model::load_pretrained(options.model_dir);
  if (!options.weights_path.empty()) return model::load_model_any(options.weights_path);
  return model::random_model(options.shape, options.weights_seed, options.init);
}

const std::vector<std::string>& default_prompts() {
  static const std::vector<std::string> prompts = {
      "And it came to pass, when the king heard the words of the book of the law, that he",
      "In the beginning God created the heaven and the earth. And the earth was without form, and",
      "The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures:",
  };
  return prompts;
}

LabModel load_lab_model(const DivergeOptions& options) {
  LabModel m;
  m.weights = load_weights(options);
  if (!options.model_dir.empty()) {
    m.tokenizer = std::make_shared<const model::Tokenizer>(model::Tokenizer::load(options.model_dir));
    m.description = options.model_label.empty() ? options.model_dir : options.model_label;
  } else if (!options.weights_path.empty()) {
    m.description = options.weights_path;
  } else {
    m.description = "random(seed " + std::to_string(options.weights_seed) + ")";
  }
  if (!options.prompt.empty() && !m.tokenizer) {
    throw std::invalid_argument("diverge: a text prompt needs a model with a tokenizer (--model kjv)");
  }
  if (!options.corpus_dir.empty()) {
    if (!m.tokenizer) {
      throw std::invalid_argument("diverge: stranger text from a corpus needs a model with a tokenizer");
    }
    const std::filesystem::path held = std::filesystem::path(options.corpus_dir) / "heldout.txt";
    std::ifstream f(held, std::ios::binary);
    if (!f) {
      throw std::runtime_error(
          "diverge: the held-out text " + held.string() + " is missing: run scripts/fetch-corpus.sh " +
          options.corpus_dir +
          " (share/moe/scripts/fetch-corpus.sh where installed; it needs the packages bible-kjv and "
          "bible-kjv-text), or leave --corpus out to have it prepared");
    }
    std::stringstream ss;
    ss << f.rdbuf();
    m.heldout = m.tokenizer->encode(ss.str());
  }
  return m;
}

std::string tokens_text(const model::Tokenizer* tokenizer, std::span<const int32_t> tokens) {
  if (tokenizer) return model::printable(tokenizer->decode(tokens));
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(tokens[i]);
  }
  return out;
}

void summarize(ConfigResult& r, int gen_length) {
  const int n = static_cast<int>(r.completions.size());
  r.first_divergence.assign(n, -1);
  std::vector<int> firsts;
  for (int i = 0; i < n; ++i) {
    const auto& c = r.completions[i];
    const size_t len = std::min(c.size(), r.alone.size());
    for (size_t t = 0; t < len; ++t) {
      if (c[t] != r.alone[t]) {
        r.first_divergence[i] = static_cast<int>(t);
        break;
      }
    }
    if (r.first_divergence[i] < 0 && c.size() != r.alone.size())
      r.first_divergence[i] = static_cast<int>(len);
    if (r.first_divergence[i] >= 0) firsts.push_back(r.first_divergence[i]);
  }
  r.distinct_completions.clear();
  {
    std::map<std::vector<int32_t>, size_t> index;  // completion -> its entry
    for (int i = 0; i < n; ++i) {
      auto [it, fresh] = index.emplace(r.completions[i], r.distinct_completions.size());
      if (fresh) r.distinct_completions.push_back({r.completions[i], 0, r.first_divergence[i]});
      ++r.distinct_completions[it->second].count;
    }
    std::stable_sort(r.distinct_completions.begin(), r.distinct_completions.end(),
                     [](const Completion& a, const Completion& b) { return a.count > b.count; });
  }
  r.distinct = static_cast<int>(r.distinct_completions.size());
  r.diverged = static_cast<int>(firsts.size());
  std::sort(firsts.begin(), firsts.end());
  if (firsts.empty()) {
    r.first_divergence_min = -1;
    r.first_divergence_median = -1;
  } else {
    r.first_divergence_min = firsts.front();
    const size_t m = firsts.size();
    r.first_divergence_median = m % 2 ? firsts[m / 2] : 0.5 * (firsts[m / 2 - 1] + firsts[m / 2]);
  }
  r.gen_points.clear();
  for (int L = 1; L < gen_length; L *= 2) r.gen_points.push_back(L);
  r.gen_points.push_back(gen_length);
  r.distinct_at.clear();
  r.diverged_at.clear();
  for (int L : r.gen_points) {
    std::set<std::vector<int32_t>> prefixes;
    int div = 0;
    for (int i = 0; i < n; ++i) {
      const auto& c = r.completions[i];
      prefixes.emplace(c.begin(), c.begin() + std::min<size_t>(L, c.size()));
      if (r.first_divergence[i] >= 0 && r.first_divergence[i] < L) ++div;
    }
    r.distinct_at.push_back(static_cast<int>(prefixes.size()));
    r.diverged_at.push_back(div);
  }
}

namespace {

// What every configuration of a run serves: the weights, the probe and the traffic's texts.
struct LabInputs {
  std::shared_ptr<const model::ModelWeights> weights;
  const std::vector<int32_t>& probe_prompt;
  std::span<const int32_t> heldout;
  const std::vector<std::vector<int32_t>>& system_prompts;
  int probe_system_length = 0;
  const std::vector<std::vector<int32_t>>& probe_messages;  // a multi-turn probe's later messages
};

// One configuration while its items run: item 0 is the probe alone (at step 0, the fixed chunk and budget, no
// speculation, no cache unless it is a conversation), items 1..N the trials. Items of every configuration of
// a run share one pool of threads; each writes only its own outcome and its trial's settings.
struct ConfigRun {
  ConfigResult result;
  model::ModelOptions model;
  std::vector<ServeOutcome> outcomes;
  std::vector<double> seconds;  // per item
  std::atomic<int> left{0};     // items not yet finished
};

void prepare(ConfigRun& run, const ConfigSpec& spec, const DivergeOptions& options, const LabInputs& in) {
  model::ModelOptions& mo = run.model;
  mo.kernel = spec.kernel;
  mo.compute = options.compute;
  mo.policy = model::ModelOptions::dispatch_mode(spec.mode, spec.capacity_factor);
  mo.max_tokens = options.max_token_budget() *
                  (1 + *std::max_element(options.vary_spec.begin(), options.vary_spec.end()));
  mo.record_routing = spec.varied || spec.turns > 1;  // the prefix cache restores routing
  const int n = options.trials;
  ConfigResult& r = run.result;
  r.spec = spec;
  r.probe_prompt_length = static_cast<int>(in.probe_prompt.size());
  if (spec.turns > 1 && in.probe_messages.size() + 1 < static_cast<size_t>(spec.turns)) {
    throw std::invalid_argument("diverge: " + spec.label() + " needs " + std::to_string(spec.turns - 1) +
                                " probe messages, not " + std::to_string(in.probe_messages.size()));
  }
  const std::vector<int> answers = split_answers(options.gen_length, spec.turns);
  r.turn_prompt_lengths = {r.probe_prompt_length};
  for (int k = 1; k < spec.turns; ++k) {
    r.turn_prompt_lengths.push_back(r.turn_prompt_lengths.back() + answers[static_cast<size_t>(k - 1)] +
                                    static_cast<int>(in.probe_messages[static_cast<size_t>(k - 1)].size()));
  }
  r.turn_cached.assign(n, std::vector<int>(static_cast<size_t>(spec.turns), 0));
  r.completions.resize(n);
  for (auto* v : {&r.chunk_sizes, &r.token_budgets, &r.spec_tokens, &r.cache_modes, &r.kv_blocks,
                  &r.probe_cached, &r.probe_preemptions, &r.probe_drafted, &r.probe_accepted}) {
    v->assign(n, 0);
  }
  run.outcomes.resize(n + 1);
  run.seconds.assign(n + 1, 0.0);
  run.left = n + 1;
}

// Serves item `item` of a configuration (0: the probe alone; 1..N: trial item - 1).
void run_item(ConfigRun& run, int item, const DivergeOptions& options, const LabInputs& in) {
  const double start = now_seconds();
  const ConfigSpec& spec = run.result.spec;
  model::Model m(in.weights, run.model);
  serving::EngineConfig engine = options.engine;
  TrafficConfig traffic = options.traffic;
  traffic.max_positions = in.weights->shape.max_positions;
  const bool chat = spec.turns > 1;
  const std::vector<int> answers = split_answers(options.gen_length, spec.turns);
  Request probe;
  probe.prompt = in.probe_prompt;
  probe.max_new_tokens = answers.front();
  probe.sampling = Sampling{spec.temperature, options.top_p, probe_sampling_seed(options.seed)};
  if (chat) {  // a chat engine: its cache serves the previous turns
    engine.prefix_cache = true;
    engine.kv_blocks = options.cache_kv_blocks;
    traffic.conversation_share = options.conversation_share;
  }
  // The probe's later turns after `first` (placed), ids from next_id, think times from think_seed; appended
  // to `requests`. Returns the probe's turns' ids.
  auto add_probe_turns = [&](const Request& first, uint64_t next_id, uint64_t think_seed,
                             std::vector<Request>& requests) {
    const std::span<const std::vector<int32_t>> messages(in.probe_messages.data(),
                                                         static_cast<size_t>(spec.turns - 1));
    const std::vector<int> think = think_times(traffic, spec.turns - 1, think_seed);
    std::vector<uint64_t> ids = {first.id};
    for (Request& t :
         follow_up_turns(first, messages, std::span<const int>(answers).subspan(1), think, next_id)) {
      ids.push_back(t.id);
      requests.push_back(std::move(t));
    }
    return ids;
  };
  if (item == 0) {
    probe.id = 1;
    std::vector<Request> requests = {probe};
    const std::vector<uint64_t> ids = add_probe_turns(probe, 2, options.seed, requests);
    run.outcomes[0] = serve(m, std::move(requests), engine, CacheKey::kSalted, ids);
    run.seconds[0] = now_seconds() - start;
    return;
  }
  const int trial = item - 1;
  ConfigResult& r = run.result;
  if (spec.varied) {
    const size_t nc = options.vary_chunks.size(), ns = options.vary_spec.size();
    const size_t t = static_cast<size_t>(trial);
    engine.chunk_size = options.vary_chunks[t % nc];
    engine.token_budget = options.vary_budgets[(t / nc) % options.vary_budgets.size()];
    engine.spec_tokens = options.vary_spec[t % ns];
    const int cache_mode = options.vary_cache ? static_cast<int>((t / ns) % 4) : 0;
    engine.prefix_cache = cache_mode > 0 || chat;
    engine.kv_blocks = engine.prefix_cache ? options.cache_kv_blocks : 0;
    if (options.vary_preemption && (t % 5 == 1 || t % 5 == 3)) engine.kv_blocks = options.tight_kv_blocks;
    const int text_length = static_cast<int>(in.probe_prompt.size()) - in.probe_system_length;
    if (cache_mode == 2) traffic.twin_tokens = in.probe_system_length + text_length / 2;
    if (cache_mode == 3) traffic.twin_tokens = static_cast<int>(in.probe_prompt.size());
    r.cache_modes[trial] = cache_mode;
  }
  r.chunk_sizes[trial] = engine.chunk_size;
  r.token_budgets[trial] = engine.token_budget;
  r.spec_tokens[trial] = engine.spec_tokens;
  r.kv_blocks[trial] = static_cast<int>(engine.kv_blocks);
  uint64_t probe_id = 0;
  const uint64_t seed = trial_seed(options.seed, trial);
  auto requests =
      make_traffic(traffic, PromptSource{in.weights->shape.vocab_size, in.heldout, in.system_prompts}, seed,
                   probe, &probe_id);
  uint64_t next_id = 1;
  size_t probe_index = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    Request& q = requests[i];
    if (q.id != probe_id)
      q.sampling = Sampling{spec.temperature, options.top_p, stranger_sampling_seed(seed, q.id)};
    else
      probe_index = i;
    next_id = std::max(next_id, q.id + 1);
  }
  const Request first = requests[probe_index];
  const std::vector<uint64_t> ids = add_probe_turns(first, next_id, seed, requests);
  run.outcomes[item] =
      serve(m, std::move(requests), engine, spec.token_keyed ? CacheKey::kTokens : CacheKey::kSalted, ids);
  run.seconds[item] = now_seconds() - start;
}

// The configuration's result from its items' outcomes.
void finish(ConfigRun& run, int gen_length) {
  ConfigResult& r = run.result;
  const std::vector<ServeOutcome>& outcomes = run.outcomes;
  r.alone = outcomes[0].probe_tokens;
  r.alone_turn_cached.clear();
  for (const serving::RequestStats& t : outcomes[0].probe_turns)
    r.alone_turn_cached.push_back(static_cast<int>(t.cached_at_admission));
  for (size_t i = 0; i + 1 < outcomes.size(); ++i) {
    const ServeOutcome& o = outcomes[i + 1];
    if (o.probe_logits_hash == outcomes[0].probe_logits_hash) ++r.bitwise_same;
    r.completions[i] = o.probe_tokens;
    r.probe_steps += o.probe_steps;
    r.probe_steps_with_drop += o.probe_steps_with_drop;
    r.probe_pairs += o.probe_pairs;
    r.probe_pairs_dropped += o.probe_pairs_dropped;
    r.rows += o.rows;
    r.probe_cached[i] = static_cast<int>(o.probe.cached_at_admission);
    r.probe_preemptions[i] = r.probe_drafted[i] = r.probe_accepted[i] = 0;
    for (size_t t = 0; t < o.probe_turns.size(); ++t) {  // every turn's
      r.turn_cached[i].at(t) = static_cast<int>(o.probe_turns[t].cached_at_admission);
      r.probe_preemptions[i] += o.probe_turns[t].preemptions;
      r.probe_drafted[i] += static_cast<int>(o.probe_turns[t].drafted);
      r.probe_accepted[i] += static_cast<int>(o.probe_turns[t].accepted);
    }
  }
  summarize(r, gen_length);
  r.seconds = 0;
  for (double t : run.seconds) r.seconds += t;
}

// Every configuration's items in one pool of `options.threads` threads (0: one per core), the items of
// earlier configurations first; `done(i, result)` is called for each configuration in order, as soon as it
// and every configuration before it have finished (under a lock: one call at a time).
std::vector<ConfigResult> run_configs(const std::vector<ConfigSpec>& specs, const DivergeOptions& options,
                                      const LabInputs& in,
                                      const std::function<void(const ConfigResult&)>& done = {}) {
  std::vector<ConfigRun> runs(specs.size());
  for (size_t c = 0; c < specs.size(); ++c) prepare(runs[c], specs[c], options, in);
  const int per_config = options.trials + 1;
  std::mutex done_mutex;
  size_t reported = 0;
  parallel(static_cast<int>(specs.size()) * per_config, resolved_threads(options.threads), [&](int i) {
    ConfigRun& run = runs[static_cast<size_t>(i / per_config)];
    run_item(run, i % per_config, options, in);
    if (--run.left > 0) return;
    std::lock_guard<std::mutex> lock(done_mutex);
    finish(run, options.gen_length);
    while (reported < runs.size() && runs[reported].left == 0) {
      if (done) done(runs[reported].result);
      ++reported;
    }
  });
  std::vector<ConfigResult> out;
  out.reserve(runs.size());
  for (ConfigRun& run : runs) out.push_back(std::move(run.result));
  return out;
}

}  // namespace

ConfigResult run_config(const ConfigSpec& spec, const DivergeOptions& options,
                        const std::shared_ptr<const model::ModelWeights>& weights,
                        const std::vector<int32_t>& probe_prompt, std::span<const int32_t> heldout,
                        const std::vector<std::vector<int32_t>>& system_prompts, int probe_system_length,
                        const std::vector<std::vector<int32_t>>& probe_messages) {
  const LabInputs in{weights, probe_prompt, heldout, system_prompts, probe_system_length, probe_messages};
  return std::move(run_configs({spec}, options, in).front());
}

DivergeReport run_diverge(const DivergeOptions& options) {
  options.validate();
  const double start = now_seconds();
  DivergeReport report;
  report.options = options;
  const LabModel lab = load_lab_model(options);
  const auto& weights = lab.weights;
  report.model = lab.description;
  report.tokenizer = lab.tokenizer;
  report.probe_prompt = options.prompt.empty()
                            ? random_prompt(options.probe_length, weights->shape.vocab_size, options.seed)
                            : lab.tokenizer->encode(options.prompt);
  if (report.probe_prompt.empty()) throw std::invalid_argument("diverge: the prompt encodes to no tokens");
  report.system_prompts = make_system_prompts(
      options.traffic, PromptSource{weights->shape.vocab_size, lab.heldout, {}}, options.seed);
  if (options.traffic.probe_system && !report.system_prompts.empty()) {
    report.probe_system = report.system_prompts.front();
    report.probe_prompt.insert(report.probe_prompt.begin(), report.probe_system.begin(),
                               report.probe_system.end());
  }
  const auto grid = options.grid.empty() ? options.default_grid() : options.grid;
  int turns = 1;
  for (const ConfigSpec& g : grid) turns = std::max(turns, g.turns);
  report.probe_messages = probe_messages(
      options.traffic, PromptSource{weights->shape.vocab_size, lab.heldout, {}}, turns, options.seed);
  size_t messages = 0;
  for (const auto& m : report.probe_messages) messages += m.size();
  const size_t longest = report.probe_prompt.size() + static_cast<size_t>(options.gen_length) + messages;
  if (longest > static_cast<size_t>(weights->shape.max_positions)) {
    throw std::invalid_argument(
        "diverge: prompt (" + std::to_string(report.probe_prompt.size()) + " tokens) + generation length (" +
        std::to_string(options.gen_length) + ") + the later turns' messages (" + std::to_string(messages) +
        ") exceed the model's max_positions (" + std::to_string(weights->shape.max_positions) + ")");
  }
  const int system_max = options.traffic.system_prompts > 0 ? options.traffic.system_max : 0;
  if (system_max + options.traffic.prompt_max + options.traffic.decode_max > weights->shape.max_positions) {
    throw std::invalid_argument(
        "diverge: stranger system_max + prompt_max + decode_max exceed the model's max_positions (" +
        std::to_string(weights->shape.max_positions) + ")");
  }
  std::vector<ConfigSpec> specs = grid;
  for (const auto& mode : options.sweep_modes) {
    for (double cf : options.sweep_capacity_factors) specs.push_back(sweep_spec(mode, cf));
  }
  const LabInputs in{weights,
                     report.probe_prompt,
                     lab.heldout,
                     report.system_prompts,
                     static_cast<int>(report.probe_system.size()),
                     report.probe_messages};
  size_t finished = 0;
  std::vector<ConfigResult> results = run_configs(specs, options, in, [&](const ConfigResult& r) {
    const char* what = finished++ < grid.size() ? "grid" : "sweep";
    if (!options.progress) return;
    options.progress(std::string(what) + " " + r.spec.label() + " cf " + fmt("%.2f", r.spec.capacity_factor) +
                     ": " + std::to_string(r.distinct) + " distinct of " + std::to_string(options.trials) +
                     " (" + fmt("%.1f", r.seconds) + " s)");
  });
  report.grid.assign(std::make_move_iterator(results.begin()),
                     std::make_move_iterator(results.begin() + static_cast<std::ptrdiff_t>(grid.size())));
  report.sweep.assign(std::make_move_iterator(results.begin() + static_cast<std::ptrdiff_t>(grid.size())),
                      std::make_move_iterator(results.end()));
  report.seconds = now_seconds() - start;
  return report;
}

std::string format_table(const DivergeReport& report) {
  const auto& o = report.options;
  std::string out;
  out += "model: " + report.model + "\n";
  const std::span<const int32_t> text =
      std::span<const int32_t>(report.probe_prompt).subspan(report.probe_system.size());
  if (report.tokenizer) {
    if (!report.probe_system.empty()) {
      out += "system prompt: \"" + tokens_text(report.tokenizer.get(), report.probe_system) + "\"\n";
    }
    out += "prompt: \"" + tokens_text(report.tokenizer.get(), text) + "\"\n";
  }
  out += "probe: " + std::to_string(report.probe_prompt.size()) + " prompt tokens (" +
         std::to_string(report.probe_system.size()) + " of a system prompt " +
         std::to_string(o.traffic.system_prompts > 0 ? 1 : 0) + " of " +
         std::to_string(o.traffic.system_prompts) + " that strangers share), " +
         std::to_string(o.gen_length) + " generated; " + std::to_string(o.trials) + " trials; budget " +
         std::to_string(o.engine.token_budget) + " tokens/step, chunk " +
         std::to_string(o.engine.chunk_size) + "; seed " + std::to_string(o.seed) + "; expert compute " +
         std::string(kernels::to_string(o.compute)) + "\n";
  // The hit/turn column only when a row's probe is a conversation.
  const bool chat = std::any_of(report.grid.begin(), report.grid.end(),
                                [](const ConfigResult& r) { return r.spec.turns > 1; });
  for (const auto& r : report.grid) {
    if (r.spec.turns <= 1) continue;
    // The multi-turn probe (every multi-turn row has the same one): its turns' prompt lengths.
    out += "multi-turn probe: " + std::to_string(r.spec.turns) + " turns, prompts of ";
    for (size_t t = 0; t < r.turn_prompt_lengths.size(); ++t) {
      if (t) out += '/';
      out += std::to_string(r.turn_prompt_lengths[t]);
    }
    out +=
        " tokens (each the previous turn, its answer and a new message), " + std::to_string(o.gen_length) +
        " generated over the turns; " + fmt("%.0f", 100.0 * o.conversation_share) +
        "% of the strangers go on as conversations; hit/turn: each turn's prompt positions from the cache\n";
    break;
  }
  char line[320];
  std::snprintf(line, sizeof(line), "%-38s %5s %8s %8s %9s %9s %9s %10s %10s %8s %9s %9s %9s", "config", "cf",
                "distinct", "diverged", "same bits", "first min", "first med", "lost steps", "lost pairs",
                "rows", "cache hit", "preempted", "drafts");
  out += line;
  out += chat ? fmt_column("hit/turn") : "\n";
  auto row = [&](const ConfigResult& r) {
    int64_t drafted = 0, accepted = 0;
    for (int d : r.probe_drafted) drafted += d;
    for (int a : r.probe_accepted) accepted += a;
    std::string hits = "-";  // per turn of a multi-turn probe: "0.12/0.93/0.95"
    if (r.spec.turns > 1) {
      hits.clear();
      for (double h : r.turn_hit_shares()) {
        if (!hits.empty()) hits += '/';
        hits += fmt("%.2f", h);
      }
    }
    std::snprintf(
        line, sizeof(line), "%-38s %5.2f %5d/%-2d %8d %9d %9s %9s %9.1f%% %9.2f%% %8lld %8.1f%% %6d/%-2d %9s",
        r.spec.label().c_str(), r.spec.capacity_factor, r.distinct, o.trials, r.diverged, r.bitwise_same,
        r.first_divergence_min < 0 ? "-" : std::to_string(r.first_divergence_min).c_str(),
        r.first_divergence_median < 0 ? "-" : fmt("%.1f", r.first_divergence_median).c_str(),
        100.0 * r.lost_step_share(), 100.0 * r.dropped_pair_share(), static_cast<long long>(r.rows),
        100.0 * r.cache_hit_share(), r.trials_preempted(), o.trials,
        (std::to_string(accepted) + "/" + std::to_string(drafted)).c_str());
    out += line;
    out += chat ? fmt_column(hits) : "\n";
  };
  for (const auto& r : report.grid) row(r);
  if (!report.grid.empty()) {
    out += "\ndistinct completions by generation length (prefixes of the same runs)\n";
    std::snprintf(line, sizeof(line), "%-38s", "config");
    out += line;
    for (int L : report.grid.front().gen_points) {
      std::snprintf(line, sizeof(line), " %5s", ("L=" + std::to_string(L)).c_str());
      out += line;
    }
    out += "\n";
    for (const auto& r : report.grid) {
      std::snprintf(line, sizeof(line), "%-38s", r.spec.label().c_str());
      out += line;
      for (int d : r.distinct_at) {
        std::snprintf(line, sizeof(line), " %5d", d);
        out += line;
      }
      out += "\n";
    }
  }
  if (!report.sweep.empty()) {
    // One block per measure, a row per mode and a column per capacity factor.
    const std::vector<double>& cfs = o.sweep_capacity_factors;
    auto block = [&](const char* title, auto&& cell) {
      out += '\n';
      out += title;
      out += '\n';
      std::snprintf(line, sizeof(line), "%-24s", "mode");
      out += line;
      for (double cf : cfs) {
        std::snprintf(line, sizeof(line), " %7s", fmt("%.2f", cf).c_str());
        out += line;
      }
      out += "\n";
      size_t i = 0;
      for (const auto& mode : o.sweep_modes) {
        std::snprintf(line, sizeof(line), "%-24s", mode.c_str());
        out += line;
        for (size_t c = 0; c < cfs.size(); ++c, ++i) {
          out += ' ';
          out += cell(report.sweep[i]);
        }
        out += "\n";
      }
    };
    out +=
        "\ncapacity-factor sweep (invariant kernels, chunk sizes and token budgets varied over the trials)";
    block("distinct completions", [&](const ConfigResult& r) { return fmt("%7.0f", r.distinct); });
    block("trials whose sampled logits equal the alone run's bit for bit",
          [&](const ConfigResult& r) { return fmt("%7.0f", r.bitwise_same); });
    block("probe pairs dropped (share)",
          [&](const ConfigResult& r) { return fmt("%6.2f%%", 100.0 * r.dropped_pair_share()); });
  }
  out += "(" + fmt("%.1f", report.seconds) + " s)\n";
  return out;
}

std::string format_completions(const DivergeReport& report) {
  const model::Tokenizer* tok = report.tokenizer.get();
  std::string out = "\ncompletions of the probe (count of ";
  out += std::to_string(report.options.trials);
  out += " trials, first generated position that differs from the alone run, text)\n";
  char head[96];
  for (const auto& r : report.grid) {
    std::snprintf(head, sizeof(head), "%s cf %.2f: %d distinct\n", r.spec.label().c_str(),
                  r.spec.capacity_factor, r.distinct);
    out += head;
    out += "  alone        ";
    out += tokens_text(tok, r.alone);
    out += '\n';
    for (const Completion& c : r.distinct_completions) {
      if (c.first_divergence < 0) {
        std::snprintf(head, sizeof(head), "  %3dx     =   ", c.count);
      } else {
        std::snprintf(head, sizeof(head), "  %3dx  @%-4d  ", c.count, c.first_divergence);
      }
      out += head;
      out += tokens_text(tok, c.tokens);
      out += '\n';
    }
  }
  return out;
}

namespace {

nlohmann::json result_json(const ConfigResult& r, const model::Tokenizer* tokenizer) {
  nlohmann::json j;
  j["config"] = r.spec.label();
  j["mode"] = r.spec.mode;
  j["kernel"] = std::string(kernels::to_string(r.spec.kernel));
  j["capacity_factor"] = r.spec.capacity_factor;
  j["varied"] = r.spec.varied;
  j["temperature"] = r.spec.temperature;
  j["turns"] = r.spec.turns;
  j["policy"] =
      policy_json(r.spec.mode, model::ModelOptions::dispatch_mode(r.spec.mode, r.spec.capacity_factor),
                  kernels::to_string(r.spec.kernel));
  j["distinct"] = r.distinct;
  j["diverged"] = r.diverged;
  j["bitwise_same"] = r.bitwise_same;
  j["first_divergence_min"] = r.first_divergence_min;
  j["first_divergence_median"] = r.first_divergence_median;
  j["first_divergence"] = r.first_divergence;
  j["probe_lost_step_share"] = r.lost_step_share();
  j["probe_dropped_pair_share"] = r.dropped_pair_share();
  j["probe_steps"] = r.probe_steps;
  j["rows"] = r.rows;
  j["token_keyed_cache"] = r.spec.token_keyed;
  j["chunk_sizes"] = r.chunk_sizes;
  j["token_budgets"] = r.token_budgets;
  j["spec_tokens"] = r.spec_tokens;
  j["cache_modes"] = r.cache_modes;
  j["kv_blocks"] = r.kv_blocks;
  j["probe_cached"] = r.probe_cached;
  j["probe_cache_hit_share"] = r.cache_hit_share();
  j["probe_turn_prompt_lengths"] = r.turn_prompt_lengths;
  j["probe_turn_cached"] = r.turn_cached;
  j["probe_turn_hit_share"] = r.turn_hit_shares();
  j["alone_turn_cached"] = r.alone_turn_cached;
  j["probe_preemptions"] = r.probe_preemptions;
  j["probe_drafted"] = r.probe_drafted;
  j["probe_accepted"] = r.probe_accepted;
  j["gen_points"] = r.gen_points;
  j["distinct_at"] = r.distinct_at;
  j["diverged_at"] = r.diverged_at;
  j["alone"] = r.alone;
  j["alone_text"] = tokens_text(tokenizer, r.alone);
  j["completions"] = nlohmann::json::array();
  for (const Completion& c : r.distinct_completions) {
    j["completions"].push_back({{"text", tokens_text(tokenizer, c.tokens)},
                                {"count", c.count},
                                {"first_divergence", c.first_divergence},
                                {"tokens", c.tokens}});
  }
  j["seconds"] = r.seconds;
  return j;
}

}  // namespace

std::string to_json(const DivergeReport& report) {
  const auto& o = report.options;
  nlohmann::json j;
  j["trials"] = o.trials;
  j["probe_length"] = report.probe_prompt.size();
  j["gen_length"] = o.gen_length;
  j["token_budget"] = o.engine.token_budget;
  j["chunk_size"] = o.engine.chunk_size;
  j["vary_chunks"] = o.vary_chunks;
  j["vary_budgets"] = o.vary_budgets;
  j["vary_spec"] = o.vary_spec;
  j["vary_cache"] = o.vary_cache;
  j["vary_preemption"] = o.vary_preemption;
  j["tight_kv_blocks"] = o.tight_kv_blocks;
  j["cache_kv_blocks"] = o.cache_kv_blocks;
  j["capacity_factor"] = o.capacity_factor;
  j["temperature"] = o.temperature;
  j["top_p"] = o.top_p;
  j["probe_turns"] = o.probe_turns;
  j["conversation_share"] = o.conversation_share;
  j["probe_messages"] = nlohmann::json::array();
  for (const auto& m : report.probe_messages)
    j["probe_messages"].push_back(tokens_text(report.tokenizer.get(), m));
  j["seed"] = o.seed;
  j["compute"] = std::string(kernels::to_string(o.compute));
  j["weights"] = report.model;
  j["prompt"] =
      tokens_text(report.tokenizer.get(),
                  std::span<const int32_t>(report.probe_prompt).subspan(report.probe_system.size()));
  j["system_prompt"] = tokens_text(report.tokenizer.get(), report.probe_system);
  j["stranger_text"] = o.corpus_dir.empty() ? "random tokens" : o.corpus_dir + "/heldout.txt";
  j["traffic"] = {{"arrival_rate", o.traffic.arrival_rate},
                  {"fixed_interval", o.traffic.fixed_interval},
                  {"prompt_min", o.traffic.prompt_min},
                  {"prompt_max", o.traffic.prompt_max},
                  {"decode_min", o.traffic.decode_min},
                  {"decode_max", o.traffic.decode_max},
                  {"probe_arrival_step", o.traffic.probe_arrival_step},
                  {"system_prompts", o.traffic.system_prompts},
                  {"system_min", o.traffic.system_min},
                  {"system_max", o.traffic.system_max},
                  {"system_share", o.traffic.system_share},
                  {"probe_system", o.traffic.probe_system}};
  j["probe_system_length"] = report.probe_system.size();
  j["probe_prompt"] = report.probe_prompt;
  j["grid"] = nlohmann::json::array();
  for (const auto& r : report.grid) j["grid"].push_back(result_json(r, report.tokenizer.get()));
  j["sweep"] = nlohmann::json::array();
  for (const auto& r : report.sweep) j["sweep"].push_back(result_json(r, report.tokenizer.get()));
  j["seconds"] = report.seconds;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

DivergeReport report_from_json(const std::string& text) {
  DivergeReport r;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    DivergeOptions& o = r.options;
    o.trials = j.at("trials").get<int>();
    o.gen_length = j.at("gen_length").get<int>();
    o.engine.token_budget = j.at("token_budget").get<int>();
    o.capacity_factor = j.at("capacity_factor").get<double>();
    o.seed = j.at("seed").get<uint64_t>();
    r.model = j.at("weights").get<std::string>();
    auto config = [](const nlohmann::json& c) {
      ConfigResult res;
      res.spec.mode = c.at("mode").get<std::string>();
      const std::string kernel = c.at("kernel").get<std::string>();
      if (kernel != "fast" && kernel != "invariant") throw std::invalid_argument("kernel '" + kernel + "'");
      res.spec.kernel = kernel == "fast" ? kernels::KernelKind::kFast : kernels::KernelKind::kInvariant;
      res.spec.capacity_factor = c.at("capacity_factor").get<double>();
      res.spec.varied = c.at("varied").get<bool>();
      res.spec.token_keyed = c.value("token_keyed_cache", false);
      res.spec.temperature = c.value("temperature", 0.0);
      res.spec.turns = c.value("turns", 1);
      res.distinct = c.at("distinct").get<int>();
      res.gen_points = c.at("gen_points").get<std::vector<int>>();
      res.distinct_at = c.at("distinct_at").get<std::vector<int>>();
      if (res.gen_points.size() != res.distinct_at.size()) {
        throw std::invalid_argument(res.spec.label() + ": gen_points and distinct_at differ in length");
      }
      return res;
    };
    for (const auto& c : j.at("grid")) r.grid.push_back(config(c));
    o.sweep_modes.clear();
    o.sweep_capacity_factors.clear();
    for (const auto& c : j.at("sweep")) {
      r.sweep.push_back(config(c));
      const std::string mode =
          c.at("mode").get<std::string>() + (r.sweep.back().spec.token_keyed ? "-tokens-key" : "");
      if (std::find(o.sweep_modes.begin(), o.sweep_modes.end(), mode) == o.sweep_modes.end()) {
        o.sweep_modes.push_back(mode);
      }
      const double cf = r.sweep.back().spec.capacity_factor;
      if (std::find(o.sweep_capacity_factors.begin(), o.sweep_capacity_factors.end(), cf) ==
          o.sweep_capacity_factors.end()) {
        o.sweep_capacity_factors.push_back(cf);
      }
    }
    if (r.sweep.size() != o.sweep_modes.size() * o.sweep_capacity_factors.size()) {
      throw std::invalid_argument("the sweep is not one configuration per mode and capacity factor");
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("diverge: not a report of moe-sim diverge --json: ") + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("diverge: not a report of moe-sim diverge --json: ") + e.what());
  }
  return r;
}

std::string svg_capacity_plot(const DivergeReport& report) {
  const auto& o = report.options;
  LinePlot c;
  c.title = "Distinct completions of one probe vs capacity factor";
  c.note = std::to_string(o.trials) + " trials per point, invariant kernels, " +
           std::to_string(o.gen_length) + " generated tokens, budget " +
           std::to_string(o.engine.token_budget) + ", seed " + std::to_string(o.seed) +
           "; coinciding series drawn once";
  c.x_label = "capacity factor";
  c.y_label = "distinct completions (of " + std::to_string(o.trials) + " trials)";
  c.y_top = o.trials;
  c.description = "moe-sim diverge: " + report.model;
  size_t i = 0;
  for (const auto& mode : o.sweep_modes) {
    PlotSeries s;
    s.name = mode;
    for (double cf : o.sweep_capacity_factors) {
      s.x.push_back(cf);
      s.y.push_back(report.sweep.at(i++).distinct);
    }
    c.series.push_back(std::move(s));
  }
  return render_svg(c);
}

std::string svg_length_plot(const DivergeReport& report) {
  const auto& o = report.options;
  LinePlot c;
  c.title = "Distinct completions vs generation length";
  c.note = std::to_string(o.trials) + " trials, capacity factor " + fmt("%.2f", o.capacity_factor) +
           ", budget " + std::to_string(o.engine.token_budget) + ", seed " + std::to_string(o.seed) +
           "; coinciding series drawn once";
  c.x_label = "generated tokens (log2 scale)";
  c.y_label = "distinct completions (of " + std::to_string(o.trials) + " trials)";
  c.y_top = o.trials;
  c.log2_x = true;
  c.description = "moe-sim diverge: " + report.model;
  for (const auto& r : report.grid) {
    PlotSeries s;
    s.name = r.spec.label();
    for (size_t k = 0; k < r.gen_points.size(); ++k) {
      s.x.push_back(r.gen_points[k]);
      s.y.push_back(r.distinct_at[k]);
    }
    c.series.push_back(std::move(s));
  }
  return render_svg(c);
}

}  // namespace moe::sim::diverge
