#include "sim/diverge/traffic.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "base/splitmix64.h"

namespace moe::sim::diverge {
namespace {

void check(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument("TrafficConfig: " + message);
}

// Knuth's product method (fine for small means): the count of uniforms whose product stays above e^-mean.
int poisson(SplitMix64& rng, double mean) {
  const double limit = std::exp(-mean);
  int k = 0;
  double p = rng.uniform();
  while (p > limit) {
    ++k;
    p *= rng.uniform();
  }
  return k;
}

}  // namespace

void TrafficConfig::validate() const {
  check(arrival_rate >= 0.0 && arrival_rate <= 16.0,
        "arrival_rate (" + std::to_string(arrival_rate) + ") must be in [0, 16]");
  check(fixed_interval >= 0, "fixed_interval (" + std::to_string(fixed_interval) + ") must be >= 0");
  check(prompt_min >= 1 && prompt_min <= prompt_max, "prompt lengths [" + std::to_string(prompt_min) + ", " +
                                                         std::to_string(prompt_max) +
                                                         "] must satisfy 1 <= min <= max");
  check(decode_min >= 1 && decode_min <= decode_max, "decode lengths [" + std::to_string(decode_min) + ", " +
                                                         std::to_string(decode_max) +
                                                         "] must satisfy 1 <= min <= max");
  check(probe_arrival_step >= 0,
        "probe_arrival_step (" + std::to_string(probe_arrival_step) + ") must be >= 0");
  check(horizon_steps >= 0, "horizon_steps (" + std::to_string(horizon_steps) + ") must be >= 0");
  check(system_prompts >= 0, "system_prompts (" + std::to_string(system_prompts) + ") must be >= 0");
  check(system_prompts == 0 || (system_min >= 1 && system_min <= system_max),
        "system prompt lengths [" + std::to_string(system_min) + ", " + std::to_string(system_max) +
            "] must satisfy 1 <= min <= max");
  check(system_share >= 0.0 && system_share <= 1.0,
        "system_share (" + std::to_string(system_share) + ") must be in [0, 1]");
  check(twin_tokens >= 0, "twin_tokens (" + std::to_string(twin_tokens) + ") must be >= 0");
  check(twin_lead >= 0 && twin_lead <= probe_arrival_step,
        "twin_lead (" + std::to_string(twin_lead) + ") must be in [0, probe_arrival_step]");
  check(conversation_share >= 0.0 && conversation_share <= 1.0,
        "conversation_share (" + std::to_string(conversation_share) + ") must be in [0, 1]");
  check(turns_max >= 1, "turns_max (" + std::to_string(turns_max) + ") must be >= 1");
  check(message_min >= 1 && message_min <= message_max, "message lengths [" + std::to_string(message_min) +
                                                            ", " + std::to_string(message_max) +
                                                            "] must satisfy 1 <= min <= max");
  check(think_max >= 0, "think_max (" + std::to_string(think_max) + ") must be >= 0");
  check(max_positions >= 1, "max_positions (" + std::to_string(max_positions) + ") must be >= 1");
}

namespace {

// A prompt of `len` tokens from `source` (a window of its text, or random tokens) drawn from `rng`.
std::vector<int32_t> draw_prompt(SplitMix64& rng, const PromptSource& source, int len) {
  if (source.text.empty()) return random_prompt(len, source.vocab_size, rng.next());
  const size_t start =
      static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(source.text.size()) - len));
  return std::vector<int32_t>(source.text.begin() + start, source.text.begin() + start + len);
}

// Each stranger (every request but the probe) goes on as a conversation with probability conversation_share:
// 1 to turns_max - 1 later turns (sim/diverge/conversation.h), while they fit max_positions; ids from
// next_id.
void add_conversations(const TrafficConfig& config, const PromptSource& source, uint64_t seed,
                       uint64_t next_id, uint64_t probe_id, std::vector<Request>& requests) {
  if (!source.text.empty() && source.text.size() < static_cast<size_t>(config.message_max)) {
    throw std::invalid_argument("TrafficConfig: the prompt text is shorter than message_max");
  }
  SplitMix64 rng(mix64(seed ^ 0x636f6e766572ull));  // "conver"
  const size_t strangers = requests.size();
  for (size_t i = 0; i < strangers; ++i) {
    if (requests[i].id == probe_id || rng.uniform() >= config.conversation_share) continue;
    const int more = static_cast<int>(rng.uniform_int(1, std::max(1, config.turns_max - 1)));
    int64_t length = static_cast<int64_t>(requests[i].prompt.size()) + requests[i].max_new_tokens;
    uint64_t previous = requests[i].id;
    for (int k = 0; k < more && config.turns_max > 1; ++k) {
      Request r;
      r.prompt =
          draw_prompt(rng, source, static_cast<int>(rng.uniform_int(config.message_min, config.message_max)));
      r.max_new_tokens = static_cast<int>(rng.uniform_int(config.decode_min, config.decode_max));
      r.think_steps = static_cast<int>(rng.uniform_int(0, config.think_max));
      length += static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens;
      if (length > config.max_positions) break;
      r.id = next_id++;
      r.arrival_step = requests[i].arrival_step;
      r.sampling = requests[i].sampling;
      r.follows = previous;
      previous = r.id;
      requests.push_back(std::move(r));
    }
  }
}

}  // namespace

std::vector<std::vector<int32_t>> make_system_prompts(const TrafficConfig& config, const PromptSource& source,
                                                      uint64_t seed) {
  config.validate();
  if (!source.text.empty() && config.system_prompts > 0 &&
      source.text.size() < static_cast<size_t>(config.system_max)) {
    throw std::invalid_argument("TrafficConfig: the prompt text is shorter than system_max");
  }
  SplitMix64 rng(mix64(seed ^ 0x73797374656dull));
  std::vector<std::vector<int32_t>> out;
  for (int s = 0; s < config.system_prompts; ++s) {
    out.push_back(
        draw_prompt(rng, source, static_cast<int>(rng.uniform_int(config.system_min, config.system_max))));
  }
  return out;
}

std::vector<std::vector<int32_t>> probe_messages(const TrafficConfig& config, const PromptSource& source,
                                                 int turns, uint64_t seed) {
  config.validate();
  if (!source.text.empty() && source.text.size() < static_cast<size_t>(config.message_max)) {
    throw std::invalid_argument("TrafficConfig: the prompt text is shorter than message_max");
  }
  SplitMix64 rng(mix64(seed ^ 0x6d657373616765ull));  // "message"
  std::vector<std::vector<int32_t>> out;
  for (int k = 1; k < turns; ++k) {
    out.push_back(
        draw_prompt(rng, source, static_cast<int>(rng.uniform_int(config.message_min, config.message_max))));
  }
  return out;
}

std::vector<int> think_times(const TrafficConfig& config, int count, uint64_t seed) {
  SplitMix64 rng(mix64(seed ^ 0x7468696e6bull));  // "think"
  std::vector<int> out;
  for (int k = 0; k < count; ++k) out.push_back(static_cast<int>(rng.uniform_int(0, config.think_max)));
  return out;
}

std::vector<int32_t> random_prompt(int length, int vocab_size, uint64_t seed) {
  SplitMix64 rng(mix64(seed ^ 0x70726F6D7074ull));
  std::vector<int32_t> out(length);
  for (auto& t : out) t = static_cast<int32_t>(rng.uniform_int(0, vocab_size - 1));
  return out;
}

std::vector<Request> make_traffic(const TrafficConfig& config, int vocab_size, uint64_t seed, Request probe,
                                  uint64_t* probe_id) {
  return make_traffic(config, PromptSource{vocab_size, {}, {}}, seed, std::move(probe), probe_id);
}

std::vector<Request> make_traffic(const TrafficConfig& config, const PromptSource& source, uint64_t seed,
                                  Request probe, uint64_t* probe_id) {
  config.validate();
  if (!source.text.empty() && source.text.size() < static_cast<size_t>(config.prompt_max)) {
    throw std::invalid_argument("TrafficConfig: the prompt text has " + std::to_string(source.text.size()) +
                                " tokens, fewer than prompt_max (" + std::to_string(config.prompt_max) + ")");
  }
  SplitMix64 rng(mix64(seed ^ 0x747261666669ull));
  std::vector<Request> out;
  uint64_t next_id = 1;
  bool probe_placed = false;
  for (int step = 0; step < config.horizon_steps || !probe_placed; ++step) {
    int arrivals = 0;
    if (step < config.horizon_steps) {
      arrivals = config.fixed_interval > 0 ? (step % config.fixed_interval == 0 ? 1 : 0)
                                           : poisson(rng, config.arrival_rate);
    }
    for (int a = 0; a < arrivals; ++a) {
      Request r;
      r.id = next_id++;
      r.arrival_step = step;
      const int len = static_cast<int>(rng.uniform_int(config.prompt_min, config.prompt_max));
      r.prompt = draw_prompt(rng, source, len);
      r.max_new_tokens = static_cast<int>(rng.uniform_int(config.decode_min, config.decode_max));
      if (!source.system.empty() && rng.uniform() < config.system_share) {
        const auto& sys = source.system[static_cast<size_t>(
            rng.uniform_int(0, static_cast<int64_t>(source.system.size()) - 1))];
        r.prompt.insert(r.prompt.begin(), sys.begin(), sys.end());
      }
      out.push_back(std::move(r));
    }
    if (config.twin_tokens > 0 && step == config.probe_arrival_step - config.twin_lead) {
      Request twin;
      twin.id = next_id++;
      twin.arrival_step = step;
      const size_t shared = std::min(probe.prompt.size(), static_cast<size_t>(config.twin_tokens));
      twin.prompt.assign(probe.prompt.begin(), probe.prompt.begin() + static_cast<std::ptrdiff_t>(shared));
      if (shared < probe.prompt.size()) {  // a continuation of its own; else the same query again
        const std::vector<int32_t> own = draw_prompt(rng, source, config.prompt_max);
        twin.prompt.insert(twin.prompt.end(), own.begin(), own.end());
      }
      twin.max_new_tokens = config.decode_min;
      out.push_back(std::move(twin));
    }
    if (step == config.probe_arrival_step) {
      probe.id = next_id++;
      probe.arrival_step = step;
      *probe_id = probe.id;
      out.push_back(std::move(probe));
      probe_placed = true;
    }
  }
  if (config.conversation_share > 0) add_conversations(config, source, seed, next_id, *probe_id, out);
  return out;
}

}  // namespace moe::sim::diverge
