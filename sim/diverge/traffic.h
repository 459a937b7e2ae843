// Seeded stranger traffic around one probe request.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/diverge/serving.h"

namespace moe::sim::diverge {

// Strangers arrive over steps [0, horizon_steps): a Poisson number per step with mean arrival_rate, or, when
// fixed_interval > 0, exactly one every fixed_interval steps (starting at step 0). Each has a prompt of
// uniform length in [prompt_min, prompt_max] with uniform random tokens and generates a uniform
// [decode_min, decode_max] tokens. The probe arrives at probe_arrival_step.
// Shared system prompts: `system_prompts` prompts of uniform length in [system_min, system_max], drawn from
// the run's seed alone (the same in every trial); each stranger begins with one of them (uniformly) with
// probability system_share, and the probe with the first one when probe_system. A twin (twin_tokens > 0)
// arrives twin_lead steps before the probe with the probe's first twin_tokens tokens and then prompt_max
// tokens of its own (none when it takes the whole probe prompt: the same query again): what a continued or
// repeated query leaves in a prefix cache.
struct TrafficConfig {
  double arrival_rate = 0.5;
  int fixed_interval = 0;
  int prompt_min = 8;
  int prompt_max = 64;
  int decode_min = 4;
  int decode_max = 48;
  int probe_arrival_step = 8;
  int horizon_steps = 400;
  int system_prompts = 4;
  int system_min = 24;
  int system_max = 96;
  double system_share = 0.5;
  bool probe_system = true;
  int twin_tokens = 0;
  int twin_lead = 4;
  // Conversations (sim/diverge/conversation.h): each stranger goes on, with probability conversation_share,
  // for 1 to turns_max - 1 more turns, each a message of uniform [message_min, message_max] tokens, an
  // answer of uniform [decode_min, decode_max] tokens and a think time of uniform [0, think_max] steps after
  // the turn before it finishes, while its whole prompt and answer stay within max_positions. The probe's
  // later turns (probe_messages) take their messages' lengths from the same range.
  double conversation_share = 0.0;
  int turns_max = 4;
  int message_min = 8;
  int message_max = 24;
  int think_max = 8;
  int max_positions = 256;

  // Throws std::invalid_argument naming the bad field.
  void validate() const;
};

// Where stranger prompts come from: uniform random tokens in [0, vocab_size) (text empty), or windows of a
// token stream (held-out text): a prompt of length n starts at a uniform offset in [0, text.size() - n].
// system: the shared system prompts (make_system_prompts; empty: none).
struct PromptSource {
  int vocab_size = 0;
  std::span<const int32_t> text;
  std::vector<std::vector<int32_t>> system;
};

// The config's system prompts from `seed` (windows of source.text, or random tokens).
std::vector<std::vector<int32_t>> make_system_prompts(const TrafficConfig& config, const PromptSource& source,
                                                      uint64_t seed);

// The requests of one trial: the strangers drawn from splitmix64 streams keyed by `seed`, plus `probe`
// (whose id and arrival_step are overwritten; its prompt is taken as it is: run_config puts the system
// prompt in front), and the twin when config.twin_tokens > 0. Ids are assigned in arrival order starting at 1
// (the probe comes after the strangers that arrive in the same step), so under request priority the strangers
// that arrived earlier outrank the probe. The later turns of the strangers' conversations come after them,
// drawn from a stream of their own (so conversation_share 0 gives the same traffic as before it existed),
// with the next ids. Returns the requests; *probe_id receives the probe's id. Prompts come from `source` (a
// text shorter than prompt_max or message_max throws std::invalid_argument).
std::vector<Request> make_traffic(const TrafficConfig& config, int vocab_size, uint64_t seed, Request probe,
                                  uint64_t* probe_id);
std::vector<Request> make_traffic(const TrafficConfig& config, const PromptSource& source, uint64_t seed,
                                  Request probe, uint64_t* probe_id);

// The messages of a probe's later turns (turns - 1 of them, of uniform [message_min, message_max] tokens)
// from `source`, drawn from the stream keyed by `seed` (the run's: the same alone and in every trial).
std::vector<std::vector<int32_t>> probe_messages(const TrafficConfig& config, const PromptSource& source,
                                                 int turns, uint64_t seed);
// `count` think times, uniform in [0, think_max] steps, from the stream keyed by `seed`.
std::vector<int> think_times(const TrafficConfig& config, int count, uint64_t seed);

// A prompt of `length` uniform random tokens in [0, vocab_size) from the stream keyed by `seed`.
std::vector<int32_t> random_prompt(int length, int vocab_size, uint64_t seed);

}  // namespace moe::sim::diverge
