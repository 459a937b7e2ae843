#include "sim/workload.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

#include "base/splitmix64.h"
#include "router/token_routes.h"
#include "sim/errors.h"
#include "sim/rng.h"
#include "sim/trace_reader.h"

namespace moe::sim {
namespace {

constexpr uint64_t kLengthTag = 0x4c454e47;   // "LENG"
constexpr uint64_t kArrivalTag = 0x41525256;  // "ARRV"
constexpr uint64_t kSystemTag = 0x53595354;   // "SYST"
constexpr uint64_t kDraftTag = 0x44524654;    // "DRFT"
constexpr uint64_t kTurnTag = 0x5455524E00;   // "TURN" << 8: + the turn number
constexpr int64_t kMaxTurns = 64;
constexpr int64_t kMaxRequestTokens = int64_t{1} << 30;

}  // namespace

void WorkloadConfig::validate() const {
  if (trace_file.empty() && num_requests < 1) {
    throw UsageError("requests must be >= 1 (got " + std::to_string(num_requests) + ")");
  }
  if (token_budget < 0)
    throw UsageError("token-budget must be >= 0 (got " + std::to_string(token_budget) + ")");
  if (!(arrival_rate >= 0.0) || !std::isfinite(arrival_rate)) {
    throw UsageError("arrival-rate must be finite and >= 0 (got " + std::to_string(arrival_rate) + ")");
  }
  auto check = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError(what);
  };
  check(system_prompts >= 0, "system-prompts must be >= 0 (got " + std::to_string(system_prompts) + ")");
  check(system_prompt_share >= 0.0 && system_prompt_share <= 1.0,
        "system-prompt-share must be in [0, 1] (got " + std::to_string(system_prompt_share) + ")");
  check(chunk_size >= 0, "chunk-size must be >= 0 (got " + std::to_string(chunk_size) + ")");
  check(max_running >= 0, "max-running must be >= 0 (got " + std::to_string(max_running) + ")");
  check(block_size >= 1, "block-size must be >= 1 (got " + std::to_string(block_size) + ")");
  check(kv_blocks >= 0 && kv_blocks < INT32_MAX,
        "kv-blocks must be in [0, 2^31) (got " + std::to_string(kv_blocks) + ")");
  check(spec_tokens >= 0, "spec-tokens must be >= 0 (got " + std::to_string(spec_tokens) + ")");
  check(spec_accept >= 0.0 && spec_accept <= 1.0,
        "spec-accept must be in [0, 1] (got " + std::to_string(spec_accept) + ")");
  const bool engine_features = chunk_size > 0 || max_running > 0 || serving_features();
  check(!engine_features || token_budget > 0,
        "chunk-size, max-running, prefix-cache, kv-blocks and spec-tokens need continuous batching "
        "(token-budget > 0)");
  check(!prefix_cache || kv_blocks > 0, "prefix-cache needs a KV pool to live in: set kv-blocks > 0");
  check(!conversations() || token_budget > 0,
        "turns (conversations) need continuous batching (token-budget > 0): a later turn arrives after the "
        "previous one finishes");
  check(!conversations() || trace_file.empty(),
        "turns (conversations) apply to synthetic workloads, not traces");
}

double WorkloadFootprint::bytes(int num_experts, int top_k, int num_ranked) const {
  // spec + its pointer in the arrival queue + its live scheduler, routing-statistics and planner entries
  const double per_request = sizeof(RequestSpec) + 8.0 + 48.0;
  const double per_token = sizeof(TokenMeta) + 8.0 * num_ranked + 4;  // row + routes + top-1 score
  const double held_tokens = std::min(tokens, kWindowsHeld * std::max(largest_step, window_tokens));
  // The largest step's plan: per-pair and per-token arrays (expert, slot, weight, status, order keys); and
  // one 256-row item's logits per thread (counted as 64 threads).
  const double per_step_token = 24.0 * top_k + 32.0;
  const double logits = 64.0 * 256.0 * 4.0 * num_experts;
  return requests * per_request + held_tokens * per_token + largest_step * per_step_token + logits;
}

WorkloadFootprint expected_footprint(const WorkloadConfig& config) {
  WorkloadFootprint f;
  f.requests = config.num_requests;
  const double prompt = std::max(1.0, config.prompt_len.expected());
  const double per_request = config.token_budget > 0 ? prompt + config.decode_len.expected() : prompt;
  f.tokens = f.requests * per_request;
  if (config.conversations()) {  // turn t repeats the t - 1 earlier turns' messages and answers
    const double turns = std::clamp(config.turns.expected(), 1.0, static_cast<double>(kMaxTurns));
    const double later = std::max(1.0, config.turn_prompt_len.expected()) + config.decode_len.expected() + 1;
    f.tokens = f.requests * (turns * per_request + later * turns * (turns - 1) / 2 * 2);
    f.requests *= turns;
  }
  f.steps = config.token_budget > 0 ? std::ceil(f.tokens / config.token_budget) : 1.0;
  f.largest_step = config.token_budget > 0 ? std::min<double>(f.tokens, config.token_budget) : f.tokens;
  return f;
}

WorkloadFootprint footprint(const std::vector<RequestSpec>& requests, int token_budget) {
  WorkloadFootprint f;
  f.requests = static_cast<double>(requests.size());
  for (const RequestSpec& r : requests) {
    f.tokens += r.prompt_len;
    if (token_budget > 0) f.tokens += r.decode_len;
  }
  f.steps = token_budget > 0 ? std::ceil(f.tokens / token_budget) : 1.0;
  f.largest_step = token_budget > 0 ? std::min<double>(f.tokens, token_budget) : f.tokens;
  return f;
}

namespace {

std::string bytes_text(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 1e300;  // unknown: do not refuse
  return static_cast<double>(pages) * static_cast<double>(page);
}

}  // namespace

void check_workload_size(const WorkloadFootprint& f, int num_experts, int top_k, int num_ranked,
                         const std::string& advice, double memory_limit_bytes) {
  const double need = f.bytes(num_experts, top_k, num_ranked);
  const double have = memory_limit_bytes > 0 ? memory_limit_bytes : physical_memory_bytes();
  if (need > have) {
    char counts[96];
    std::snprintf(counts, sizeof counts, "%.4g requests, %.4g tokens", f.requests, f.tokens);
    throw DataError("the workload needs at least " + bytes_text(need) + " of memory (" + counts +
                    "), more than the " + bytes_text(have) +
                    (memory_limit_bytes > 0 ? " allowed; " : " of this machine; ") + advice);
  }
  const double max_step = static_cast<double>(INT32_MAX / std::max(1, num_experts));
  if (f.largest_step > max_step) {
    char tokens[32];
    std::snprintf(tokens, sizeof tokens, "%.0f", f.largest_step);
    throw UsageError("a step of " + std::string(tokens) + " tokens is too large (at most " +
                     std::to_string(INT32_MAX / std::max(1, num_experts)) + " with " +
                     std::to_string(num_experts) +
                     " experts); use --token-budget to split the workload into steps");
  }
}

namespace {

// Appends the later turns of every conversation that `first` begins (first[i] begins conversation i), each
// turn right after the turn it follows, ids counting on.
void add_turns(const WorkloadConfig& config, uint64_t seed, std::vector<RequestSpec>& first) {
  std::vector<RequestSpec> out;
  uint64_t next_id = 0;
  for (size_t c = 0; c < first.size(); ++c) {
    Rng count(stream_key(seed, c, kTurnTag));
    const int64_t turns = std::clamp<int64_t>(config.turns.sample(count), 1, kMaxTurns);
    RequestSpec turn = first[c];
    turn.id = next_id++;
    const uint64_t conversation = turn.id;
    out.push_back(turn);
    for (int64_t t = 1; t < turns; ++t) {
      const RequestSpec& previous = out.back();
      Rng lengths(stream_key(seed, c, kTurnTag + static_cast<uint64_t>(t)));
      const int64_t message =
          std::clamp<int64_t>(config.turn_prompt_len.sample(lengths), 1, kMaxRequestTokens);
      const int64_t decode = std::clamp<int64_t>(config.decode_len.sample(lengths), 0, kMaxRequestTokens);
      const int64_t think = std::max<int64_t>(0, config.think_steps.sample(lengths));
      const int64_t answer_end = int64_t{previous.prompt_len} + previous.decode_len + 1;
      if (answer_end + message > kMaxRequestTokens) break;  // the conversation is as long as a request may be
      RequestSpec next;
      next.id = next_id++;
      next.arrival_step = previous.arrival_step;
      next.prompt_len = static_cast<uint32_t>(answer_end + message);
      next.decode_len = static_cast<uint32_t>(decode);
      next.system_prompt = previous.system_prompt;
      next.system_len = previous.system_len;
      next.conversation = conversation;
      next.follows = static_cast<int64_t>(out.size()) - 1;
      next.think_steps = think;
      next.turn_ends =
          previous.turn_ends.empty() ? std::vector<uint32_t>{previous.prompt_len} : previous.turn_ends;
      next.turn_ends.push_back(static_cast<uint32_t>(answer_end));
      next.turn_ends.push_back(next.prompt_len);
      out.push_back(std::move(next));
    }
  }
  first = std::move(out);
}

}  // namespace

std::vector<RequestSpec> make_requests(const WorkloadConfig& config, uint64_t seed) {
  config.validate();
  if (!config.trace_file.empty()) return read_trace(config.trace_file);
  std::vector<uint32_t> system_len(config.system_prompts);
  for (int s = 0; s < config.system_prompts; ++s) {
    Rng lengths(stream_key(seed, static_cast<uint64_t>(s), kSystemTag));
    system_len[s] =
        static_cast<uint32_t>(std::clamp<int64_t>(config.system_prompt_len.sample(lengths), 1, 1 << 20));
  }
  std::vector<RequestSpec> out(config.num_requests);
  Rng arrivals(stream_key(seed, kArrivalTag));
  double clock = 0.0;
  for (int i = 0; i < config.num_requests; ++i) {
    RequestSpec& r = out[i];
    r.id = static_cast<uint64_t>(i);
    Rng lengths(stream_key(seed, r.id, kLengthTag));
    const int64_t prompt = std::clamp<int64_t>(config.prompt_len.sample(lengths), 1, kMaxRequestTokens);
    const int64_t decode = std::clamp<int64_t>(config.decode_len.sample(lengths), 0, kMaxRequestTokens);
    r.prompt_len = static_cast<uint32_t>(prompt);
    r.decode_len = static_cast<uint32_t>(decode);
    if (config.system_prompts > 0) {
      Rng system(stream_key(seed, r.id, kSystemTag));
      if (system.uniform() < config.system_prompt_share) {
        r.system_prompt = static_cast<int32_t>(system.uniform_int(0, config.system_prompts - 1));
        r.system_len = system_len[r.system_prompt];
        r.prompt_len =
            static_cast<uint32_t>(std::min<int64_t>(int64_t{r.prompt_len} + r.system_len, kMaxRequestTokens));
      }
    }
    if (config.arrival_rate > 0.0) {
      clock += arrivals.exponential() / config.arrival_rate;
      r.arrival_step = static_cast<int64_t>(std::floor(clock));
    }
  }
  if (config.conversations()) add_turns(config, seed, out);
  return out;
}

// The engine's client for a synthetic workload: tokens from each request's content (its system prompt's,
// else its own), drafts always proposed, blocks salted for every rule the steps are planned under.
class StepStream::Client : public serving::EngineClient {
 public:
  Client(const std::vector<RequestSpec>& requests, std::vector<RoutingRule> rules)
      : requests_(requests), rules_(std::move(rules)) {}
  uint64_t token(const serving::EngineRequest& r, uint32_t position) override {
    const RequestSpec& s = requests_[r.client_index];
    if (position < s.system_len)
      return mix64(kSystemPromptContent | static_cast<uint64_t>(s.system_prompt)) + position;
    return mix64(s.content()) + position;
  }
  int propose(const serving::EngineRequest&, uint32_t, int max) override { return max; }
  uint64_t salt(const serving::EngineRequest& r, uint32_t block_end) override {
    return prefix_cache_salt(rules_, block_end, r.turns());
  }

 private:
  const std::vector<RequestSpec>& requests_;
  std::vector<RoutingRule> rules_;
};

// The verdict of a synthetic workload: the leading drafts that pass a Bernoulli(spec_accept) draw from
// (seed, request, position) are accepted. Nothing is computed here: the consumers replay the steps.
class StepStream::Verdict : public serving::StepHandler {
 public:
  Verdict(uint64_t seed, double accept) : seed_(seed), accept_(accept) {}
  void accept(const serving::Step& step, std::vector<uint32_t>& accepted) override {
    for (const serving::Span& s : step.spans) {
      uint32_t n = s.end - s.begin;
      if (s.drafts > 0) {
        n = 1;
        while (n < s.end - s.begin) {
          Rng draw(stream_key(seed_, s.id, s.begin + n, kDraftTag));
          if (!(draw.uniform() < accept_)) break;
          ++n;
        }
      }
      accepted.push_back(n);
    }
  }

 private:
  uint64_t seed_;
  double accept_;
};

StepStream::StepStream(const std::vector<RequestSpec>& requests, const WorkloadConfig& config, uint64_t seed,
                       std::vector<RoutingRule> cache_rules)
    : requests_(requests), config_(config) {
  if (config_.token_budget <= 0) return;
  client_ = std::make_unique<Client>(requests, std::move(cache_rules));
  verdict_ = std::make_unique<Verdict>(seed, config_.spec_accept);
  serving::EngineConfig e;
  e.token_budget = config_.token_budget;
  e.chunk_size = config_.chunk_size;
  e.max_running = config_.max_running > 0 ? config_.max_running : INT32_MAX;
  e.prefix_cache = config_.prefix_cache;
  e.block_size = config_.block_size;
  e.kv_blocks = config_.kv_blocks;
  e.spec_tokens = config_.spec_tokens;
  std::vector<serving::EngineRequest> list;
  list.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const RequestSpec& r = requests[i];
    serving::EngineRequest e_request{r.id, r.arrival_step, r.prompt_len, r.decode_len + 1, i};
    if (config_.turn_ends) e_request.turn_ends = r.turn_ends;
    if (r.follows >= 0) {
      e_request.follows = requests.at(static_cast<size_t>(r.follows)).id;
      e_request.think_steps = r.think_steps;
    }
    list.push_back(std::move(e_request));
  }
  try {
    engine_ = std::make_unique<serving::Engine>(e, std::move(list), *client_);
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
}

StepStream::~StepStream() = default;

serving::EngineStats StepStream::engine_stats() const {
  return engine_ ? engine_->stats() : serving::EngineStats{};
}

bool StepStream::next_static(serving::Step& step, std::vector<TokenMeta>& keys) {
  if (static_done_) return false;
  static_done_ = true;
  step = serving::Step{};
  keys.clear();
  for (size_t i = 0; i < requests_.size(); ++i) {
    const RequestSpec& r = requests_[i];
    step.admitted.push_back(serving::Admission{r.id, r.prompt_len, 0, {}, false});
    step.spans.push_back(
        serving::Span{r.id, 0, r.prompt_len, static_cast<int32_t>(step.rows.size()), 0, true, i});
    for (uint32_t p = 0; p < r.prompt_len; ++p) step.rows.push_back(TokenMeta{r.id, p});
    step.accepted.push_back(r.prompt_len);
    step.finished.push_back(r.id);
  }
  return true;
}

// A system prompt's rows and rejected drafts are keyed by their content.
void StepStream::key_rows(const serving::Step& step, std::vector<TokenMeta>& keys) const {
  keys.clear();
  bool keyed = false;
  for (size_t i = 0; i < step.spans.size() && !keyed; ++i) {
    const serving::Span& s = step.spans[i];
    const RequestSpec& r = requests_[s.client_index];
    keyed = s.begin < r.system_len || step.accepted[i] < s.end - s.begin || r.content() != r.id;
  }
  if (!keyed) return;
  keys.assign(step.rows.begin(), step.rows.end());
  for (size_t i = 0; i < step.spans.size(); ++i) {
    const serving::Span& s = step.spans[i];
    const RequestSpec& r = requests_[s.client_index];
    if (r.content() != r.id) {  // a later turn: the conversation's tokens
      for (uint32_t q = s.begin; q < s.end; ++q) keys[s.row + (q - s.begin)] = TokenMeta{r.content(), q};
    }
    for (uint32_t q = s.begin; q < std::min(s.end, r.system_len); ++q) {
      keys[s.row + (q - s.begin)] =
          TokenMeta{kSystemPromptContent | static_cast<uint64_t>(r.system_prompt), q};
    }
    for (uint32_t q = s.begin + step.accepted[i]; q < s.end; ++q) {
      keys[s.row + (q - s.begin)] = TokenMeta{kDraftContent | s.id, q};
    }
  }
}

bool StepStream::next(serving::Step& step, std::vector<TokenMeta>& keys) {
  if (requests_.empty()) return false;
  if (config_.token_budget <= 0) return next_static(step, keys);
  if (!serving::run_step(*engine_, step, *verdict_)) return false;
  key_rows(step, keys);
  return true;
}

std::vector<serving::Step> schedule(const std::vector<RequestSpec>& requests, const WorkloadConfig& config,
                                    uint64_t seed, std::vector<std::vector<TokenMeta>>* keys) {
  std::vector<serving::Step> steps;
  StepStream stream(requests, config, seed);
  serving::Step step;
  std::vector<TokenMeta> step_keys;
  if (keys) keys->clear();
  while (stream.next(step, step_keys)) {
    steps.push_back(step);
    if (keys) keys->push_back(step_keys);
  }
  return steps;
}

}  // namespace moe::sim
