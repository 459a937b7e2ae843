#include "sim/diverge/traffic.h"

#include <cmath>
#include <stdexcept>
#include <string>

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
}

std::vector<int32_t> random_prompt(int length, int vocab_size, uint64_t seed) {
  SplitMix64 rng(mix64(seed ^ 0x70726F6D7074ull));
  std::vector<int32_t> out(length);
  for (auto& t : out) t = static_cast<int32_t>(rng.uniform_int(0, vocab_size - 1));
  return out;
}

std::vector<Request> make_traffic(const TrafficConfig& config, int vocab_size, uint64_t seed, Request probe,
                                  uint64_t* probe_id) {
  config.validate();
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
      r.prompt = random_prompt(len, vocab_size, rng.next());
      r.max_new_tokens = static_cast<int>(rng.uniform_int(config.decode_min, config.decode_max));
      out.push_back(std::move(r));
    }
    if (step == config.probe_arrival_step) {
      probe.id = next_id++;
      probe.arrival_step = step;
      *probe_id = probe.id;
      out.push_back(std::move(probe));
      probe_placed = true;
    }
  }
  return out;
}

}  // namespace moe::sim::diverge
