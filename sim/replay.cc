#include "sim/replay.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>

#include "router/topk_router.h"
#include "sim/errors.h"
#include "sim/meta_csv.h"
#include "sim/npy.h"
#include "sim/report.h"

namespace moe::sim {

ReplayResult run_replay(const SimConfig& input) {
  ReplayResult result;
  result.config = input;
  SimConfig& config = result.config;
  if (config.replay.logits_path.empty()) throw UsageError("replay needs --logits FILE.npy");
  if (config.replay.out_path.empty()) throw UsageError("replay needs --out FILE.csv");
  const LogitsMatrix logits = read_npy_f32(config.replay.logits_path);
  if (!logits.converted_from.empty()) {
    std::cerr << "moe-sim: note: '" << config.replay.logits_path << "' holds " << logits.converted_from
              << " logits; converted them to float32 (round to nearest)\n";
  }
  const int E = static_cast<int>(logits.cols);
  if (config.is_explicit("experts")) {
    if (config.router.num_experts != E) {
      throw UsageError("--experts " + std::to_string(config.router.num_experts) + " does not match the " +
                       std::to_string(E) + " experts (columns) of '" + config.replay.logits_path + "'");
    }
  } else {
    config.router.num_experts = E;
  }
  try {
    config.router.validate();
  } catch (const std::exception& e) {
    throw UsageError(std::string(e.what()) + " (num_experts taken from '" + config.replay.logits_path + "')");
  }
  const int T = static_cast<int>(logits.rows);
  std::vector<TokenMeta> meta;
  if (config.replay.meta_path.empty()) {
    for (int t = 0; t < T; ++t) meta.push_back(TokenMeta{0, static_cast<uint32_t>(t)});
  } else {
    meta = read_meta_csv(config.replay.meta_path, T);
  }
  std::set<uint64_t> requests;
  for (const auto& m : meta) requests.insert(m.request_id);
  result.num_requests = static_cast<int64_t>(requests.size());

  serving::Step step;
  step.rows = meta;
  step.finished.assign(requests.begin(), requests.end());
  TokenRoutes routes;
  DispatchPlan plan;
  try {
    const TopKRouter router(config.router, ranks_needed(config.router, config.policy));
    router.route(logits.values.data(), T, routes);
    RoutingStatsCounter counter(config.router.num_experts, config.router.top_k);
    counter.add(step.rows, routes);
    // One plan: the stats and the CSV both come from it. Sequence scope without request specs: each
    // request's rows are its whole prompt (no state).
    PolicySimulator sim(config.router.num_experts, config.router.top_k, config.policy, false);
    sim.add(step, routes);
    plan = sim.last_plan();
    result.stats = sim.result(counter.result());
  } catch (const std::invalid_argument& e) {
    std::string where = " (in '" + config.replay.logits_path + "'";
    if (!config.replay.meta_path.empty()) where += " with '" + config.replay.meta_path + "'";
    throw DataError(std::string(e.what()) + where + ")");
  }

  std::ofstream out(config.replay.out_path);
  if (!out) throw DataError("cannot write '" + config.replay.out_path + "'");
  out << provenance_line(config, kReplay) << "\n";
  out << "token,j,expert,slot,weight,status\n";
  char weight[32];
  const int k = config.router.top_k;
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < k; ++j) {
      const int64_t p = static_cast<int64_t>(t) * k + j;
      std::snprintf(weight, sizeof weight, "%.9g", static_cast<double>(plan.pair_weight[p]));
      out << t << ',' << j << ',' << plan.pair_expert[p] << ',' << plan.pair_slot[p] << ',' << weight << ','
          << to_string(plan.pair_status[p]) << '\n';
    }
  }
  out.flush();
  if (!out) throw DataError("cannot write '" + config.replay.out_path + "'");
  return result;
}

}  // namespace moe::sim
