#include "sim/probe.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <set>
#include <unordered_set>

#include "router/dispatch_planner.h"
#include "router/topk_router.h"
#include "sim/errors.h"
#include "sim/experiment.h"
#include "sim/rng.h"
#include "sim/score_model.h"

namespace moe::sim {
namespace {

constexpr uint64_t kTrialTag = 0x545249414cull;  // "TRIAL"

struct PairOutcome {
  int32_t expert;
  PairStatus status;
  uint32_t weight_bits;
  bool operator==(const PairOutcome&) const = default;
};

// The probe's pairs in (position, j) order, read from a plan whose rows are described by `rows`.
void probe_outcome(const DispatchPlan& plan, const std::vector<TokenMeta>& rows, uint64_t probe_id, int top_k,
                   std::vector<PairOutcome>& out) {
  for (size_t t = 0; t < rows.size(); ++t) {
    if (rows[t].request_id != probe_id) continue;
    for (int j = 0; j < top_k; ++j) {
      const int64_t pair = static_cast<int64_t>(t) * top_k + j;
      out[static_cast<size_t>(rows[t].position) * top_k + j] = PairOutcome{
          plan.pair_expert[pair], plan.pair_status[pair], std::bit_cast<uint32_t>(plan.pair_weight[pair])};
    }
  }
}

// Fisher-Yates with the trial's generator.
template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    std::swap(v[i - 1], v[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(i) - 1))]);
  }
}

uint64_t hash_outcome(const std::vector<PairOutcome>& o) {
  uint64_t h = 0x6a09e667f3bcc908ull;
  for (const PairOutcome& p : o) {
    h = mix64(h ^ static_cast<uint32_t>(p.expert));
    h = mix64(h ^ (static_cast<uint64_t>(p.status) << 32 | p.weight_bits));
  }
  return h;
}

}  // namespace

std::vector<ProbeResult> run_probe(const SimConfig& config, const std::vector<SimConfig>& per_mode,
                                   Progress* progress) {
  const int E = config.router.num_experts;
  const int k = config.router.top_k;
  const uint64_t probe_id = config.probe.probe_id;
  int num_ranked = k;
  for (const SimConfig& m : per_mode) num_ranked = std::max(num_ranked, ranks_needed(m.router, m.policy));
  // A trial's batch: the probe and up to max_strangers strangers of the expected prompt length.
  WorkloadFootprint trial;
  trial.requests = 1.0 + config.probe.max_strangers;
  trial.tokens = config.probe.probe_len + static_cast<double>(config.probe.max_strangers) *
                                              std::max(1.0, config.workload.prompt_len.expected());
  trial.steps = 1;
  trial.largest_step = trial.tokens;
  check_workload_size(trial, E, k, num_ranked,
                      "use a shorter --probe-len, fewer --max-strangers or a shorter --prompt-len");
  const ScoreModel scores(config.scores, E, config.seed);
  const TopKRouter router(config.router, num_ranked);

  std::vector<DispatchPlanner> planners;
  std::vector<ProbeResult> results(per_mode.size());
  for (size_t m = 0; m < per_mode.size(); ++m) {
    planners.emplace_back(E, k, per_mode[m].policy);
    results[m].mode = per_mode[m].mode;
    results[m].policy = per_mode[m].policy;
    results[m].trials = config.probe.trials;
    results[m].probe_pairs = static_cast<int64_t>(config.probe.probe_len) * k;
  }

  // Alone.
  std::vector<TokenMeta> rows;
  for (int p = 0; p < config.probe.probe_len; ++p)
    rows.push_back(TokenMeta{probe_id, static_cast<uint32_t>(p)});
  std::vector<float> logits;
  TokenRoutes routes;
  DispatchPlan plan;
  scores.logits(rows, logits);
  router.route(logits.data(), static_cast<int>(rows.size()), routes);
  const size_t probe_pairs = static_cast<size_t>(config.probe.probe_len) * k;
  std::vector<std::vector<PairOutcome>> alone(per_mode.size(), std::vector<PairOutcome>(probe_pairs));
  std::vector<std::unordered_set<uint64_t>> outcomes(per_mode.size());
  for (size_t m = 0; m < per_mode.size(); ++m) {
    planners[m].plan(routes, rows, nullptr, plan);
    probe_outcome(plan, rows, probe_id, k, alone[m]);
    results[m].alone_drop_rate = static_cast<double>(plan.num_dropped) / static_cast<double>(probe_pairs);
  }

  std::vector<PairOutcome> seen(probe_pairs);
  std::vector<std::pair<uint64_t, int64_t>> blocks;  // (request id, length)
  const bool by_request = config.probe.shuffle == "requests";
  double batch_tokens = 0.0;
  for (int trial = 0; trial < config.probe.trials; ++trial) {
    Rng rng(stream_key(config.seed, kTrialTag, static_cast<uint64_t>(trial)));
    const int n = static_cast<int>(rng.uniform_int(config.probe.min_strangers, config.probe.max_strangers));
    // Requests as blocks of rows: the probe first, then the strangers.
    blocks.assign(1, {probe_id, static_cast<int64_t>(config.probe.probe_len)});
    for (int s = 0; s < n; ++s) {
      uint64_t id;
      do {
        id = static_cast<uint64_t>(rng.uniform_int(0, 0xffffffffll));
      } while (id == probe_id || std::find_if(blocks.begin(), blocks.end(),
                                              [&](const auto& b) { return b.first == id; }) != blocks.end());
      blocks.emplace_back(id, std::max<int64_t>(1, config.workload.prompt_len.sample(rng)));
    }
    if (by_request) shuffle(blocks, rng);
    rows.clear();
    for (const auto& [id, len] : blocks) {
      for (int64_t p = 0; p < len; ++p) rows.push_back(TokenMeta{id, static_cast<uint32_t>(p)});
    }
    if (!by_request) shuffle(rows, rng);
    if (rows.size() > static_cast<size_t>(INT32_MAX / E)) {
      throw UsageError("probe trial " + std::to_string(trial) + " has " + std::to_string(rows.size()) +
                       " tokens, more than " + std::to_string(INT32_MAX / E) + " (with " + std::to_string(E) +
                       " experts); use a shorter --prompt-len or fewer --max-strangers");
    }
    batch_tokens += static_cast<double>(rows.size());
    scores.logits(rows, logits);
    router.route(logits.data(), static_cast<int>(rows.size()), routes);
    for (size_t m = 0; m < per_mode.size(); ++m) {
      planners[m].plan(routes, rows, nullptr, plan);
      probe_outcome(plan, rows, probe_id, k, seen);
      int64_t displaced = 0, dropped = 0;
      for (size_t p = 0; p < probe_pairs; ++p) {
        if (!(seen[p] == alone[m][p])) ++displaced;
        if (seen[p].status == PairStatus::kDropped) ++dropped;
      }
      results[m].displaced_pairs += displaced;
      if (displaced > 0) ++results[m].trials_displaced;
      results[m].mean_drop_rate += static_cast<double>(dropped) / static_cast<double>(probe_pairs);
      outcomes[m].insert(hash_outcome(seen));
    }
    if (progress) progress->advance();
  }
  for (size_t m = 0; m < per_mode.size(); ++m) {
    ProbeResult& r = results[m];
    r.displacement_rate = static_cast<double>(r.displaced_pairs) /
                          (static_cast<double>(r.trials) * static_cast<double>(probe_pairs));
    r.distinct_outcomes = static_cast<int>(outcomes[m].size());
    r.mean_drop_rate /= r.trials;
    r.mean_batch_tokens = batch_tokens / r.trials;
  }
  return results;
}

}  // namespace moe::sim
