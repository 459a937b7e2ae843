#include "sim/sim_config.h"

#include <algorithm>
#include <climits>

#include "sim/deploy/deploy_report.h"
#include "sim/deploy/deploy_settings.h"
#include "sim/errors.h"
#include "sim/text.h"

namespace moe::sim {
namespace {

int to_int(const std::string& name, const std::string& v) {
  const int64_t x = parse_int(v, "--" + name);
  if (x < INT_MIN || x > INT_MAX) throw UsageError("--" + name + ": " + v + " is out of range");
  return static_cast<int>(x);
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

std::string join_doubles(const std::vector<double>& v) {
  std::string out;
  for (double d : v) {
    if (!out.empty()) out += ",";
    out += format_double(d);
  }
  return out;
}

std::string bool_text(bool b) {
  return b ? "true" : "false";
}

// "a|b|c" of a list of names.
std::string alternatives(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : "|") + n;
  return out;
}

// The modes and their rules, from the modes themselves (describe_rules).
std::string mode_help() {
  std::string out = "dispatch mode (";
  for (const std::string& m : DispatchPolicy::mode_names()) {
    out += (out.back() == '(' ? "" : "; ") + m + ": " + describe_rules(DispatchPolicy::mode(m));
  }
  return out + "); default greedy";
}

std::vector<Setting> make_settings() {
  std::vector<Setting> s;
  auto add = [&](Setting setting) { s.push_back(std::move(setting)); };
  const unsigned kSynthetic = kRun | kSweep | kProbe;

  // Applied first (build_config): a preset sets router fields, a mode policy fields.
  add({"preset", "mixtral|qwen2-moe|deepseek-v3|switch",
       "router preset (scoring and weighting rules, experts, top-k)", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) { c.preset = v; },
       [](const SimConfig& c) { return c.preset.empty() ? std::string("none") : c.preset; }});
  add({"mode", alternatives(DispatchPolicy::mode_names()), mode_help(), kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) { c.mode = v; }, [](const SimConfig& c) { return c.mode; }});

  // Router.
  add({"experts", "INT", "number of experts E", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) { c.router.num_experts = to_int("experts", v); },
       [](const SimConfig& c) { return std::to_string(c.router.num_experts); }});
  add({"top-k", "INT", "experts chosen per token k", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) { c.router.top_k = to_int("top-k", v); },
       [](const SimConfig& c) { return std::to_string(c.router.top_k); }});
  add({"scoring", "softmax|sigmoid", "router scores", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) { c.router.scoring = parse_scoring(v); },
       [](const SimConfig& c) { return std::string(to_string(c.router.scoring)); }});
  add({"renormalize", "BOOL", "renormalise the k chosen weights to sum 1", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) { c.router.renormalize = parse_bool(v, "--renormalize"); },
       [](const SimConfig& c) { return bool_text(c.router.renormalize); }});
  add({"scaling-factor", "FLOAT", "weight scaling factor", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) {
         c.router.scaling_factor = static_cast<float>(parse_double(v, "--scaling-factor"));
       },
       [](const SimConfig& c) { return format_double(c.router.scaling_factor); }});
  add({"groups", "INT", "expert groups for group-limited choice (1 = none)", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) { c.router.num_groups = to_int("groups", v); },
       [](const SimConfig& c) { return std::to_string(c.router.num_groups); }});
  add({"topk-groups", "INT", "groups kept under a group limit", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) { c.router.topk_groups = to_int("topk-groups", v); },
       [](const SimConfig& c) { return std::to_string(c.router.topk_groups); }});

  add({"selection-bias", "LIST",
       "per-expert selection bias (chooses, never weighs), E comma-separated values", kAllCommands, false,
       false, true,
       [](SimConfig& c, const std::string& v) {
         c.router.selection_bias.clear();
         for (const auto& x : split(v, ',')) {
           if (!x.empty())
             c.router.selection_bias.push_back(static_cast<float>(parse_double(x, "--selection-bias")));
         }
       },
       [](const SimConfig& c) {
         std::vector<double> b(c.router.selection_bias.begin(), c.router.selection_bias.end());
         return b.empty() ? std::string("none") : join_doubles(b);
       }});

  // Dispatch policy.
  add({"capacity-factor", "FLOAT", "capacity factor cf (> 0)", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) {
         c.policy.capacity_factor = parse_double(v, "--capacity-factor");
       },
       [](const SimConfig& c) { return format_double(c.policy.capacity_factor); }});
  add({"capacity-rounding", "ceil|floor", "rounding of cf * T * k / E", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) { c.policy.rounding = parse_capacity_rounding(v); },
       [](const SimConfig& c) { return std::string(to_string(c.policy.rounding)); }});
  add({"min-capacity", "INT", "lower bound on any capacity", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) { c.policy.min_capacity = to_int("min-capacity", v); },
       [](const SimConfig& c) { return std::to_string(c.policy.min_capacity); }});
  add({"scope", alternatives(capacity_scope_names()), "capacity scope", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) { c.policy.scope = parse_capacity_scope(v); },
       [](const SimConfig& c) { return std::string(to_string(c.policy.scope)); }});
  add({"priority", "arrival|request|score|random", "who claims slots first", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) { c.policy.priority = parse_priority(v); },
       [](const SimConfig& c) { return std::string(to_string(c.policy.priority)); }});
  add({"overflow", "drop|reroute", "what happens to a pair that finds its expert full", kAllCommands, false,
       false, true, [](SimConfig& c, const std::string& v) { c.policy.overflow = parse_overflow(v); },
       [](const SimConfig& c) { return std::string(to_string(c.policy.overflow)); }});
  add({"reroute-depth", "INT", "ranks beyond top-k a rerouted pair may try", kAllCommands, false, false, true,
       [](SimConfig& c, const std::string& v) { c.policy.reroute_depth = to_int("reroute-depth", v); },
       [](const SimConfig& c) { return std::to_string(c.policy.reroute_depth); }});
  add({"lookahead", "INT", "prefix scope: positions past a prompt row that its budget covers", kAllCommands,
       false, false, true,
       [](SimConfig& c, const std::string& v) {
         const int w = to_int("lookahead", v);
         if (w < 0) throw UsageError("--lookahead must be >= 0 (got " + v + ")");
         c.policy.lookahead = static_cast<uint32_t>(w);
       },
       [](const SimConfig& c) { return std::to_string(c.policy.lookahead); }});
  add({"renormalize-survivors", "BOOL", "scale surviving weights of a token that lost pairs", kAllCommands,
       false, false, true,
       [](SimConfig& c, const std::string& v) {
         c.policy.renormalize_survivors = parse_bool(v, "--renormalize-survivors");
       },
       [](const SimConfig& c) { return bool_text(c.policy.renormalize_survivors); }});
  add({"seed", "UINT64", "seed of every random draw (workload, scores, random priority)", kAllCommands, false,
       false, true, [](SimConfig& c, const std::string& v) { c.seed = parse_uint64(v, "--seed"); },
       [](const SimConfig& c) { return std::to_string(c.seed); }});

  add({"seeds", "LIST",
       "run once per seed, comma-separated: a column each (under mpirun the seeds spread over the ranks)",
       kRun, false, false, true,
       [](SimConfig& c, const std::string& v) {
         c.seeds.clear();
         for (const auto& x : split(v, ',')) {
           if (!trim(x).empty()) c.seeds.push_back(parse_uint64(trim(x), "--seeds"));
         }
         if (c.seeds.empty()) throw UsageError("--seeds: no seeds in '" + v + "'");
       },
       [](const SimConfig& c) {
         std::vector<std::string> v;
         for (uint64_t x : c.seeds) v.push_back(std::to_string(x));
         return v.empty() ? std::string("none") : join(v, ",");
       }});

  // Workload.
  add({"requests", "INT", "number of synthetic requests", kRun | kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.workload.num_requests = to_int("requests", v); },
       [](const SimConfig& c) { return std::to_string(c.workload.num_requests); }});
  add({"prompt-len", "DIST", "prompt lengths: fixed:N | uniform:A,B | lognormal:mean=M,sigma=S[,max=X]",
       kSynthetic, false, false, true,
       [](SimConfig& c, const std::string& v) { c.workload.prompt_len = LengthDist::parse(v); },
       [](const SimConfig& c) { return c.workload.prompt_len.to_string(); }});
  add({"decode-len", "DIST", "decode lengths (continuous batching only), same syntax", kRun | kSweep, false,
       false, true, [](SimConfig& c, const std::string& v) { c.workload.decode_len = LengthDist::parse(v); },
       [](const SimConfig& c) { return c.workload.decode_len.to_string(); }});
  add({"token-budget", "INT",
       "tokens per step with continuous batching (0 = one static batch of all prompts)", kRun | kSweep, false,
       false, true,
       [](SimConfig& c, const std::string& v) { c.workload.token_budget = to_int("token-budget", v); },
       [](const SimConfig& c) { return std::to_string(c.workload.token_budget); }});
  add({"arrival-rate", "FLOAT", "Poisson arrivals per step (0 = all at step 0)", kRun | kSweep, false, false,
       true,
       [](SimConfig& c, const std::string& v) {
         c.workload.arrival_rate = parse_double(v, "--arrival-rate");
       },
       [](const SimConfig& c) { return format_double(c.workload.arrival_rate); }});
  add({"system-prompts", "INT", "shared system prompts that requests may begin with (0 = none)",
       kRun | kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.workload.system_prompts = to_int("system-prompts", v); },
       [](const SimConfig& c) { return std::to_string(c.workload.system_prompts); }});
  add({"system-prompt-len", "DIST", "lengths of the system prompts (drawn once each), same syntax",
       kRun | kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.workload.system_prompt_len = LengthDist::parse(v); },
       [](const SimConfig& c) { return c.workload.system_prompt_len.to_string(); }});
  add({"system-prompt-share", "FLOAT",
       "share of requests that begin with a system prompt (one of them, uniformly)", kRun | kSweep, false,
       false, true,
       [](SimConfig& c, const std::string& v) {
         c.workload.system_prompt_share = parse_double(v, "--system-prompt-share");
       },
       [](const SimConfig& c) { return format_double(c.workload.system_prompt_share); }});
  add({"turns", "DIST",
       "turns per conversation (later turns resend the earlier prompts and answers; fixed:1 = none)",
       kRun | kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.workload.turns = LengthDist::parse(v); },
       [](const SimConfig& c) { return c.workload.turns.to_string(); }});
  add({"turn-prompt-len", "DIST", "new message tokens of each later turn, same syntax", kRun | kSweep, false,
       false, true,
       [](SimConfig& c, const std::string& v) { c.workload.turn_prompt_len = LengthDist::parse(v); },
       [](const SimConfig& c) { return c.workload.turn_prompt_len.to_string(); }});
  add({"think-steps", "DIST", "steps between a turn's end and the next turn's arrival, same syntax",
       kRun | kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.workload.think_steps = LengthDist::parse(v); },
       [](const SimConfig& c) { return c.workload.think_steps.to_string(); }});
  add({"turn-ends", "BOOL",
       "admit later turns with their turn ends (false: as plain prompts, the rule before conversations)",
       kRun | kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.workload.turn_ends = parse_bool(v, "--turn-ends"); },
       [](const SimConfig& c) { return bool_text(c.workload.turn_ends); }});
  add({"chunk-size", "INT", "most prompt tokens a request prefills per step (0 = the token budget)",
       kRun | kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.workload.chunk_size = to_int("chunk-size", v); },
       [](const SimConfig& c) { return std::to_string(c.workload.chunk_size); }});
  add({"max-running", "INT", "most requests running at once (0 = no limit)", kRun | kSweep, false, false,
       true, [](SimConfig& c, const std::string& v) { c.workload.max_running = to_int("max-running", v); },
       [](const SimConfig& c) { return std::to_string(c.workload.max_running); }});
  add({"prefix-cache", "BOOL", "a block prefix cache shared by all requests (needs --kv-blocks)",
       kRun | kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.workload.prefix_cache = parse_bool(v, "--prefix-cache"); },
       [](const SimConfig& c) { return bool_text(c.workload.prefix_cache); }});
  add({"block-size", "INT", "positions per KV block (the prefix cache's unit)", kRun | kSweep, false, false,
       true, [](SimConfig& c, const std::string& v) { c.workload.block_size = to_int("block-size", v); },
       [](const SimConfig& c) { return std::to_string(c.workload.block_size); }});
  add({"kv-blocks", "INT",
       "KV memory in blocks: preemption beyond it; the prefix cache lives in it (0 = unbounded)",
       kRun | kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.workload.kv_blocks = to_int("kv-blocks", v); },
       [](const SimConfig& c) { return std::to_string(c.workload.kv_blocks); }});
  add({"spec-tokens", "INT", "speculative decoding: draft tokens verified per decode step (0 = off)",
       kRun | kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.workload.spec_tokens = to_int("spec-tokens", v); },
       [](const SimConfig& c) { return std::to_string(c.workload.spec_tokens); }});
  add({"spec-accept", "FLOAT", "probability that a draft token is accepted (the leading accepted ones count)",
       kRun | kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.workload.spec_accept = parse_double(v, "--spec-accept"); },
       [](const SimConfig& c) { return format_double(c.workload.spec_accept); }});
  add({"trace", "FILE", "CSV or JSONL trace: arrival_step|arrival_time, prompt_len, decode_len",
       kRun | kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.workload.trace_file = v; },
       [](const SimConfig& c) {
         return c.workload.trace_file.empty() ? std::string("none") : c.workload.trace_file;
       }});

  // Score model. A named model (applied first, like preset and mode) sets every field below.
  add({"scores", "gaussian|mixtral-8x7b",
       "named score model: its skew, temperature, topic-rho and noise-std (the flags override them)",
       kSynthetic, false, false, true,
       [](SimConfig& c, const std::string& v) { c.scores = named_score_model(v); },
       [](const SimConfig& c) { return c.scores.name; }});
  add({"skew", "SPEC", "expert popularity: none | zipf:S | dirichlet:ALPHA | explicit (with --popularity)",
       kSynthetic, false, false, true,
       [](SimConfig& c, const std::string& v) { c.scores.skew = Skew::parse(v); },
       [](const SimConfig& c) { return c.scores.skew.to_string(); }});
  add({"popularity", "LIST",
       "explicit per-expert mean logits pop[e], E comma-separated values (skew explicit)", kSynthetic, false,
       false, true,
       [](SimConfig& c, const std::string& v) {
         std::vector<double> values;
         for (const auto& x : split(v, ',')) {
           if (!trim(x).empty()) values.push_back(parse_double(trim(x), "--popularity"));
         }
         c.scores.skew = Skew::explicit_values(std::move(values));
       },
       [](const SimConfig& c) {
         return c.scores.skew.values.empty() ? std::string("none") : join_doubles(c.scores.skew.values);
       }});
  add({"temperature", "FLOAT", "logit temperature (> 0)", kSynthetic, false, false, true,
       [](SimConfig& c, const std::string& v) { c.scores.temperature = parse_double(v, "--temperature"); },
       [](const SimConfig& c) { return format_double(c.scores.temperature); }});
  add({"topic-rho", "FLOAT", "per-request topic correlation in [0, 1]", kSynthetic, false, false, true,
       [](SimConfig& c, const std::string& v) { c.scores.topic_rho = parse_double(v, "--topic-rho"); },
       [](const SimConfig& c) { return format_double(c.scores.topic_rho); }});
  add({"noise-std", "FLOAT", "scale of the random part of the logits", kSynthetic, false, false, true,
       [](SimConfig& c, const std::string& v) { c.scores.noise_std = parse_double(v, "--noise-std"); },
       [](const SimConfig& c) { return format_double(c.scores.noise_std); }});

  deploy::add_deploy_settings(s);

  // Sweep and probe.
  add({"modes", "LIST", "modes to compare, comma-separated (default: --mode if given, else all)",
       kSweep | kProbe, false, false, true,
       [](SimConfig& c, const std::string& v) {
         c.modes.clear();
         for (const auto& m : split(v, ',')) {
           if (!m.empty()) c.modes.push_back(m);
         }
         for (const auto& m : c.modes) DispatchPolicy::mode(m);  // throws for an unknown mode
       },
       [](const SimConfig& c) { return join(c.compared_modes(), ","); }});
  add({"capacity-factors", "LIST", "capacity factors to sweep, comma-separated", kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) {
         c.sweep.capacity_factors.clear();
         for (const auto& x : split(v, ',')) {
           const double cf = parse_double(x, "--capacity-factors");
           if (!(cf > 0.0)) throw UsageError("--capacity-factors: every factor must be > 0 (got " + x + ")");
           c.sweep.capacity_factors.push_back(cf);
         }
       },
       [](const SimConfig& c) { return join_doubles(c.sweep.capacity_factors); }});
  add({"axis", "NAME=V1,V2,...", "extra sweep axis over any setting, e.g. top-k=1,2,4 (repeatable)", kSweep,
       false, true, true,
       [](SimConfig& c, const std::string& v) {
         c.sweep.axes.clear();
         for (const auto& a : split(v, ';')) {
           if (!a.empty()) c.sweep.axes.push_back(a);
         }
       },
       [](const SimConfig& c) {
         return c.sweep.axes.empty() ? std::string("none") : join(c.sweep.axes, ";");
       }});
  add({"scopes", "LIST", "shorthand for --axis scope=LIST", kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.sweep.axes.push_back("scope=" + v); },
       [](const SimConfig&) { return std::string(); }});
  add({"csv", "FILE", "also write the sweep as CSV", kSweep, false, false, true,
       [](SimConfig& c, const std::string& v) { c.sweep.csv_path = v; },
       [](const SimConfig& c) { return c.sweep.csv_path.empty() ? std::string("none") : c.sweep.csv_path; }});
  add({"svg", "FILE", "also write an SVG plot of drop rate against capacity factor", kSweep, false, false,
       true, [](SimConfig& c, const std::string& v) { c.sweep.svg_path = v; },
       [](const SimConfig& c) { return c.sweep.svg_path.empty() ? std::string("none") : c.sweep.svg_path; }});
  add({"trials", "INT", "probe trials (random batches of strangers)", kProbe, false, false, true,
       [](SimConfig& c, const std::string& v) { c.probe.trials = to_int("trials", v); },
       [](const SimConfig& c) { return std::to_string(c.probe.trials); }});
  add({"probe-len", "INT", "tokens in the probe request", kProbe, false, false, true,
       [](SimConfig& c, const std::string& v) { c.probe.probe_len = to_int("probe-len", v); },
       [](const SimConfig& c) { return std::to_string(c.probe.probe_len); }});
  add({"min-strangers", "INT", "fewest strangers per trial", kProbe, false, false, true,
       [](SimConfig& c, const std::string& v) { c.probe.min_strangers = to_int("min-strangers", v); },
       [](const SimConfig& c) { return std::to_string(c.probe.min_strangers); }});
  add({"max-strangers", "INT", "most strangers per trial", kProbe, false, false, true,
       [](SimConfig& c, const std::string& v) { c.probe.max_strangers = to_int("max-strangers", v); },
       [](const SimConfig& c) { return std::to_string(c.probe.max_strangers); }});
  add({"probe-id", "UINT64", "request id of the probe", kProbe, false, false, true,
       [](SimConfig& c, const std::string& v) { c.probe.probe_id = parse_uint64(v, "--probe-id"); },
       [](const SimConfig& c) { return std::to_string(c.probe.probe_id); }});

  add({"shuffle", "rows|requests", "probe batch order: all rows shuffled, or whole requests shuffled", kProbe,
       false, false, true,
       [](SimConfig& c, const std::string& v) {
         if (v != "rows" && v != "requests") {
           throw UsageError("unknown shuffle '" + v + "' (known: rows, requests)");
         }
         c.probe.shuffle = v;
       },
       [](const SimConfig& c) { return c.probe.shuffle; }});

  // Replay.
  add({"logits", "FILE", "router logits, float32 [T, E] .npy", kReplay, false, false, true,
       [](SimConfig& c, const std::string& v) { c.replay.logits_path = v; },
       [](const SimConfig& c) { return c.replay.logits_path; }});
  add({"meta", "FILE", "token metadata CSV (request_id,position); default one request, positions 0..T-1",
       kReplay, false, false, true, [](SimConfig& c, const std::string& v) { c.replay.meta_path = v; },
       [](const SimConfig& c) {
         return c.replay.meta_path.empty() ? std::string("none") : c.replay.meta_path;
       }});
  add({"out", "FILE", "plan CSV to write: token,j,expert,slot,weight,status", kReplay, false, false, true,
       [](SimConfig& c, const std::string& v) { c.replay.out_path = v; },
       [](const SimConfig& c) { return c.replay.out_path; }});

  // Output.
  add({"json", "", "print one JSON object instead of the table", kAllCommands, true, false, false,
       [](SimConfig& c, const std::string& v) { c.json = parse_bool(v, "--json"); },
       [](const SimConfig& c) { return bool_text(c.json); }});
  add({"quiet", "", "no progress bar on stderr", kAllCommands, true, false, false,
       [](SimConfig& c, const std::string& v) { c.quiet = parse_bool(v, "--quiet"); },
       [](const SimConfig& c) { return bool_text(c.quiet); }});
  add({"threads", "INT",
       "threads for scores, routing and planning (0 = all cores); results do not depend on it", kRun | kSweep,
       false, false, false,
       [](SimConfig& c, const std::string& v) {
         c.threads = to_int("threads", v);
         if (c.threads < 0) throw UsageError("threads must be >= 0 (got " + v + ")");
       },
       [](const SimConfig& c) { return std::to_string(c.threads); }});
  return s;
}

}  // namespace

const char* command_name(Command c) {
  switch (c) {
    case kRun:
      return "run";
    case kSweep:
      return "sweep";
    case kProbe:
      return "probe";
    case kReplay:
      return "replay";
    default:
      return "?";
  }
}

bool SimConfig::models_deployment() const {
  if (deploy.enabled()) return true;
  for (const std::string& a : sweep.axes) {
    if (a.rfind("ep-size=", 0) == 0) return true;
  }
  return false;
}

bool SimConfig::is_explicit(const std::string& name) const {
  return std::find(explicit_settings.begin(), explicit_settings.end(), name) != explicit_settings.end();
}

std::vector<std::string> SimConfig::compared_modes() const {
  if (!modes.empty()) return modes;
  if (is_explicit("mode")) return {mode};
  return DispatchPolicy::mode_names();
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = make_settings();
  return table;
}

const Setting* find_setting(const std::string& name) {
  for (const auto& s : settings()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

SimConfig build_config(const Overrides& overrides) {
  SimConfig c;
  for (const auto& [name, value] : overrides) {
    if (find_setting(name) == nullptr) throw UsageError("unknown setting '" + name + "'");
    c.explicit_settings.push_back(name);
  }
  try {
    if (auto it = overrides.find("preset"); it != overrides.end()) {
      c.preset = it->second;
      c.router = RouterConfig::preset(it->second);
      c.deploy.model = deploy::ModelShape::of_preset(it->second);
    }
    if (auto it = overrides.find("mode"); it != overrides.end()) {
      c.mode = it->second;
      c.policy = DispatchPolicy::mode(it->second);
    }
    if (auto it = overrides.find("scores"); it != overrides.end()) c.scores = named_score_model(it->second);
    if (overrides.count("popularity") && overrides.count("skew") && overrides.at("skew") != "explicit") {
      throw UsageError("popularity sets the skew to explicit, but skew is '" + overrides.at("skew") +
                       "' (give one of them)");
    }
    for (const Setting& s : settings()) {
      if (s.name == "preset" || s.name == "mode" || s.name == "scores") continue;
      if (auto it = overrides.find(s.name); it != overrides.end()) s.apply(c, it->second);
    }
    c.policy.seed = c.seed;
    c.router.validate();
    c.policy.validate();
    c.workload.validate();
    c.scores.validate();
    c.deploy.validate(c.router.num_experts, c.router.num_groups);
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(e.what());
  }
  if (c.probe.trials < 1)
    throw UsageError("trials must be >= 1 (got " + std::to_string(c.probe.trials) + ")");
  if (c.probe.probe_len < 1)
    throw UsageError("probe-len must be >= 1 (got " + std::to_string(c.probe.probe_len) + ")");
  if (c.probe.min_strangers < 0 || c.probe.max_strangers < c.probe.min_strangers) {
    throw UsageError("need 0 <= min-strangers <= max-strangers (got " +
                     std::to_string(c.probe.min_strangers) + ", " + std::to_string(c.probe.max_strangers) +
                     ")");
  }
  if (c.sweep.capacity_factors.empty()) throw UsageError("capacity-factors is empty");
  return c;
}

std::string config_line(const SimConfig& config, Command command) {
  std::string out;
  for (const Setting& s : settings()) {
    if (!s.in_config || !(s.commands & command) || s.name == "scopes") continue;
    if (s.deployment && !config.models_deployment()) continue;
    if (!out.empty()) out += " ";
    out += s.name;
    out += "=";
    out += s.show(config);
  }
  return out;
}

nlohmann::ordered_json config_json(const SimConfig& c, Command command) {
  nlohmann::ordered_json j;
  j["command"] = command_name(command);
  j["preset"] = c.preset.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.preset);
  j["mode"] = c.mode;
  nlohmann::ordered_json router;
  router["num_experts"] = c.router.num_experts;
  router["top_k"] = c.router.top_k;
  router["scoring"] = std::string(to_string(c.router.scoring));
  router["renormalize"] = c.router.renormalize;
  router["scaling_factor"] = c.router.scaling_factor;
  router["num_groups"] = c.router.num_groups;
  router["topk_groups"] = c.router.topk_groups;
  router["selection_bias"] = c.router.selection_bias;
  j["router"] = router;
  nlohmann::ordered_json policy;
  policy["capacity_factor"] = c.policy.capacity_factor;
  policy["rounding"] = std::string(to_string(c.policy.rounding));
  policy["min_capacity"] = c.policy.min_capacity;
  policy["scope"] = std::string(to_string(c.policy.scope));
  policy["priority"] = std::string(to_string(c.policy.priority));
  policy["overflow"] = std::string(to_string(c.policy.overflow));
  policy["reroute_depth"] = c.policy.reroute_depth;
  policy["lookahead"] = c.policy.lookahead;
  policy["seed"] = c.policy.seed;
  policy["renormalize_survivors"] = c.policy.renormalize_survivors;
  j["policy"] = policy;
  if (command != kReplay) {
    nlohmann::ordered_json workload;
    if (command == kProbe) {
      workload["kind"] = "probe";
      workload["stranger_prompt_len"] = c.workload.prompt_len.to_string();
    } else if (!c.workload.trace_file.empty()) {
      workload["kind"] = "trace";
      workload["trace"] = c.workload.trace_file;
    } else {
      workload["kind"] = "synthetic";
      workload["requests"] = c.workload.num_requests;
      workload["prompt_len"] = c.workload.prompt_len.to_string();
      workload["decode_len"] = c.workload.decode_len.to_string();
      workload["arrival_rate"] = c.workload.arrival_rate;
    }
    if (command != kProbe) {
      workload["batching"] = c.workload.token_budget > 0 ? "continuous" : "static";
      workload["token_budget"] = c.workload.token_budget;
      if (c.workload.system_prompts > 0) {
        workload["system_prompts"] = c.workload.system_prompts;
        workload["system_prompt_len"] = c.workload.system_prompt_len.to_string();
        workload["system_prompt_share"] = c.workload.system_prompt_share;
      }
      if (c.workload.conversations()) {
        workload["turns"] = c.workload.turns.to_string();
        workload["turn_prompt_len"] = c.workload.turn_prompt_len.to_string();
        workload["think_steps"] = c.workload.think_steps.to_string();
        workload["turn_ends"] = c.workload.turn_ends;
      }
      if (c.workload.token_budget > 0) {
        nlohmann::ordered_json engine;
        engine["chunk_size"] = c.workload.chunk_size;
        engine["max_running"] = c.workload.max_running;
        engine["prefix_cache"] = c.workload.prefix_cache;
        engine["block_size"] = c.workload.block_size;
        engine["kv_blocks"] = c.workload.kv_blocks;
        engine["spec_tokens"] = c.workload.spec_tokens;
        engine["spec_accept"] = c.workload.spec_accept;
        workload["engine"] = engine;
      }
    }
    j["workload"] = workload;
    nlohmann::ordered_json scores;
    scores["kind"] = "gaussian";
    scores["name"] = c.scores.name;
    scores["skew"] = c.scores.skew.to_string();
    if (c.scores.skew.kind == Skew::Kind::kExplicit) scores["popularity"] = c.scores.skew.values;
    scores["temperature"] = c.scores.temperature;
    scores["topic_rho"] = c.scores.topic_rho;
    scores["noise_std"] = c.scores.noise_std;
    j["score_model"] = scores;
    if (c.models_deployment()) j["deployment"] = deploy::config_json(c.deploy);
  } else {
    j["logits"] = c.replay.logits_path;
    j["meta"] = c.replay.meta_path.empty() ? nlohmann::ordered_json(nullptr)
                                           : nlohmann::ordered_json(c.replay.meta_path);
    j["out"] = c.replay.out_path;
  }
  j["seed"] = c.seed;
  if (command == kRun) j["seeds"] = c.seeds;
  if (command == kSweep) {
    j["modes"] = c.compared_modes();
    j["capacity_factors"] = c.sweep.capacity_factors;
    j["axes"] = c.sweep.axes;
  }
  if (command == kProbe) {
    j["modes"] = c.compared_modes();
    j["trials"] = c.probe.trials;
    j["probe_len"] = c.probe.probe_len;
    j["min_strangers"] = c.probe.min_strangers;
    j["max_strangers"] = c.probe.max_strangers;
    j["probe_id"] = c.probe.probe_id;
    j["shuffle"] = c.probe.shuffle;
  }
  return j;
}

}  // namespace moe::sim
