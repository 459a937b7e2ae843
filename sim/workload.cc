#include "sim/workload.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

#include "router/token_routes.h"
#include "sim/errors.h"
#include "sim/rng.h"
#include "sim/trace_reader.h"

namespace moe::sim {
namespace {

constexpr uint64_t kLengthTag = 0x4c454e47;   // "LENG"
constexpr uint64_t kArrivalTag = 0x41525256;  // "ARRV"
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
    if (config.arrival_rate > 0.0) {
      clock += arrivals.exponential() / config.arrival_rate;
      r.arrival_step = static_cast<int64_t>(std::floor(clock));
    }
  }
  return out;
}

StepScheduler::StepScheduler(const std::vector<RequestSpec>& requests, int token_budget)
    : requests_(requests), token_budget_(token_budget) {
  if (token_budget_ <= 0) return;
  pending_.reserve(requests.size());
  for (const RequestSpec& r : requests) pending_.push_back(&r);
  std::stable_sort(pending_.begin(), pending_.end(), [](const RequestSpec* a, const RequestSpec* b) {
    if (a->arrival_step != b->arrival_step) return a->arrival_step < b->arrival_step;
    return a->id < b->id;
  });
}

bool StepScheduler::next(Step& step) {
  if (requests_.empty()) return false;
  if (token_budget_ <= 0) {
    if (static_done_) return false;
    static_done_ = true;
    step = Step{};
    for (const RequestSpec& r : requests_) {
      for (uint32_t p = 0; p < r.prompt_len; ++p) step.rows.push_back(TokenMeta{r.id, p});
      step.num_prefill_tokens += static_cast<int>(r.prompt_len);
      step.finished.push_back(r.id);
    }
    return true;
  }
  if (next_pending_ == pending_.size() && active_.empty()) return false;
  if (active_.empty() && pending_[next_pending_]->arrival_step > now_)
    now_ = pending_[next_pending_]->arrival_step;
  while (next_pending_ < pending_.size() && pending_[next_pending_]->arrival_step <= now_) {
    active_.push_back(Active{pending_[next_pending_++], 0});
  }
  step.index = now_;
  step.rows.clear();
  step.finished.clear();
  step.num_prefill_tokens = 0;
  step.num_decode_tokens = 0;
  int budget = token_budget_;
  // Decode: one token per request whose prompt was finished in an earlier step.
  for (Active& a : active_) {
    if (budget == 0) break;
    const uint32_t total = a.spec->prompt_len + a.spec->decode_len;
    if (a.next_position >= a.spec->prompt_len && a.next_position < total) {
      step.rows.push_back(TokenMeta{a.spec->id, a.next_position++});
      ++step.num_decode_tokens;
      --budget;
    }
  }
  // Prefill: prompt chunks in admission order.
  for (Active& a : active_) {
    if (budget == 0) break;
    if (a.next_position >= a.spec->prompt_len) continue;
    const uint32_t chunk =
        std::min<uint32_t>(static_cast<uint32_t>(budget), a.spec->prompt_len - a.next_position);
    for (uint32_t i = 0; i < chunk; ++i) step.rows.push_back(TokenMeta{a.spec->id, a.next_position++});
    step.num_prefill_tokens += static_cast<int>(chunk);
    budget -= static_cast<int>(chunk);
  }
  std::erase_if(active_, [&](const Active& a) {
    if (a.next_position == a.spec->prompt_len + a.spec->decode_len) {
      step.finished.push_back(a.spec->id);
      return true;
    }
    return false;
  });
  ++now_;
  return true;
}

std::vector<Step> schedule(const std::vector<RequestSpec>& requests, int token_budget) {
  std::vector<Step> steps;
  StepScheduler scheduler(requests, token_budget);
  Step step;
  while (scheduler.next(step)) steps.push_back(step);
  return steps;
}

}  // namespace moe::sim
