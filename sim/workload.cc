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
  return out;
}

// The engine's client for a synthetic workload: tokens from each request's content (its system prompt's,
// else its own), drafts always proposed, each accepted with probability spec_accept.
class StepScheduler::Client : public serving::EngineClient {
 public:
  Client(const std::vector<RequestSpec>& requests, const RoutingRule& rule)
      : requests_(requests), rule_(rule) {}
  const RequestSpec& spec(const serving::EngineRequest& r) const { return requests_[r.client_index]; }
  uint64_t token(const serving::EngineRequest& r, uint32_t position) override {
    const RequestSpec& s = spec(r);
    if (position < s.system_len)
      return mix64(kSystemPromptContent | static_cast<uint64_t>(s.system_prompt)) + position;
    return mix64(s.id) + position;
  }
  int propose(const serving::EngineRequest&, uint32_t, int max) override { return max; }
  uint64_t salt(uint32_t block_end, uint32_t prompt_length) override {
    return prefix_cache_salt(rule_, block_end, prompt_length);
  }

 private:
  const std::vector<RequestSpec>& requests_;
  RoutingRule rule_;
};

StepScheduler::StepScheduler(const std::vector<RequestSpec>& requests, const WorkloadConfig& config,
                             uint64_t seed, const RoutingRule& cache_rule)
    : requests_(requests), config_(config), seed_(seed) {
  if (config_.token_budget <= 0) return;
  client_ = std::make_unique<Client>(requests, cache_rule);
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
    list.push_back(serving::EngineRequest{r.id, r.arrival_step, r.prompt_len, r.decode_len + 1, i});
  }
  try {
    engine_ = std::make_unique<serving::Engine>(e, std::move(list), *client_);
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
}

StepScheduler::~StepScheduler() = default;

serving::EngineStats StepScheduler::engine_stats() const {
  return engine_ ? engine_->stats() : serving::EngineStats{};
}

bool StepScheduler::next(Step& step) {
  if (requests_.empty()) return false;
  if (config_.token_budget <= 0) {
    if (static_done_) return false;
    static_done_ = true;
    step = Step{};
    for (const RequestSpec& r : requests_) {
      step.admitted.push_back(serving::Admission{r.id, r.prompt_len, 0, {}, false});
      for (uint32_t p = 0; p < r.prompt_len; ++p) step.rows.push_back(TokenMeta{r.id, p});
      step.num_prefill_tokens += static_cast<int>(r.prompt_len);
      step.finished.push_back(r.id);
    }
    return true;
  }
  if (!engine_->next(plan_)) return false;
  step.index = plan_.step;
  step.rows.swap(plan_.rows);
  step.keys.clear();
  step.preempted.swap(plan_.preempted);
  step.admitted.swap(plan_.admitted);
  step.num_prefill_tokens = 0;
  step.num_decode_tokens = 0;
  // Drafts: the leading ones that pass a Bernoulli(spec_accept) draw from (seed, request, position) are
  // accepted. Router keys: a system prompt's rows and rejected drafts are keyed by their content.
  accepted_.clear();
  bool keyed = false;
  for (const serving::Span& s : plan_.spans) {
    const RequestSpec& r = requests_[s.client_index];
    uint32_t accepted = s.end - s.begin;
    if (s.drafts > 0) {
      accepted = 1;
      while (accepted < s.end - s.begin) {
        Rng draw(stream_key(seed_, s.id, s.begin + accepted, kDraftTag));
        if (!(draw.uniform() < config_.spec_accept)) break;
        ++accepted;
      }
    }
    accepted_.push_back(accepted);
    const uint32_t prompt_rows = std::min(s.end, std::max(s.begin, r.prompt_len)) - s.begin;
    step.num_prefill_tokens += static_cast<int>(prompt_rows);
    step.num_decode_tokens += static_cast<int>(s.end - s.begin - prompt_rows);
    keyed |= s.begin < r.system_len || accepted < s.end - s.begin;
  }
  if (keyed) {
    step.keys.assign(step.rows.begin(), step.rows.end());
    for (size_t i = 0; i < plan_.spans.size(); ++i) {
      const serving::Span& s = plan_.spans[i];
      const RequestSpec& r = requests_[s.client_index];
      for (uint32_t q = s.begin; q < std::min(s.end, r.system_len); ++q) {
        step.keys[s.row + (q - s.begin)] =
            TokenMeta{kSystemPromptContent | static_cast<uint64_t>(r.system_prompt), q};
      }
      for (uint32_t q = s.begin + accepted_[i]; q < s.end; ++q) {
        step.keys[s.row + (q - s.begin)] = TokenMeta{kDraftContent | s.id, q};
      }
    }
  }
  engine_->complete(accepted_, result_);
  step.rollbacks.swap(result_.rollbacks);
  step.registered.swap(result_.registered);
  step.finished.swap(result_.finished);
  return true;
}

std::vector<Step> schedule(const std::vector<RequestSpec>& requests, const WorkloadConfig& config,
                           uint64_t seed) {
  std::vector<Step> steps;
  StepScheduler scheduler(requests, config, seed);
  Step step;
  while (scheduler.next(step)) steps.push_back(step);
  return steps;
}

}  // namespace moe::sim
