// The deployment accounting of one policy's steps: each planned step's kept pairs are given to ranks (the
// tokens' home ranks by the configured split, each pair's computing rank by the placement's replica rule,
// moe::parallel::ExpertPlacement::replica_rank), cut to the ranks' capacity when there is one, and counted:
// per rank its tokens, rows and experts, the dispatch's rows per link class, and the step's modelled time
// (sim/deploy/step_cost.h: per phase the slowest rank). Integer counts in step order, so the result depends
// only on the steps, not on threads or processes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "moe/parallel/expert_placement.h"
#include "router/dispatch_plan.h"
#include "router/dispatch_policy.h"
#include "router/token_meta.h"
#include "router/token_routes.h"
#include "sim/deploy/deploy_config.h"
#include "sim/deploy/deploy_stats.h"

namespace moe::sim::deploy {

class DeployAccounter {
 public:
  // `config` validated for this router (E experts, top_k, num_groups groups); `policy`: the planned policy,
  // whose priority orders the claims on a rank's capacity. The first config.warmup_steps steps are a warm-up
  // (not accounted; any placement); the placement is made after it, from its choices or from the loads file
  // (read here: DataError), whichever config.loads names (only the EPLB placements use loads).
  DeployAccounter(const DeployConfig& config, int num_experts, int top_k, int num_groups,
                  const DispatchPolicy& policy);

  // One planned step: its rows, their routes and the plan. During the warm-up the router's choices (ranks
  // < top_k) are counted as the experts' loads and nothing else; after it every pair is accounted.
  void add(std::span<const TokenMeta> rows, const TokenRoutes& routes, const DispatchPlan& plan);

  // The totals so far.
  DeployStats result() const;
  // The placement of the accounted steps (none during the warm-up).
  const parallel::ExpertPlacement* placement() const { return placement_ ? &*placement_ : nullptr; }

 private:
  void set_placement(std::span<const float> loads);
  void assign_homes(std::span<const TokenMeta> rows, int T);
  void assign_ranks(const DispatchPlan& plan);
  void apply_rank_capacity(std::span<const TokenMeta> rows, const TokenRoutes& routes, int T);
  void count_traffic(int T);
  void fold_step(int T);

  DeployConfig config_;
  int num_experts_, top_k_, num_groups_;
  DispatchPolicy policy_;
  std::optional<parallel::ExpertPlacement> placement_;
  std::vector<float> file_loads_;   // the loads of config.loads when it names a file
  std::vector<int64_t> warm_load_;  // the router's choices per expert during the warm-up
  int64_t warm_steps_ = 0;
  // The placement in the accounting's form, as (expert, rank) cells: per expert its distinct ranks, the index
  // of its first cell and its only cell (-1: replicated); per cell its rank; per rank its node.
  std::vector<std::vector<int32_t>> distinct_ranks_;
  std::vector<int32_t> cell_base_, single_cell_, cell_rank_, node_of_;
  std::vector<int32_t> replicated_;  // the experts with more than one copy
  // Per step, reused.
  std::vector<int32_t> home_;        // [T] the token's home rank
  std::vector<int32_t> pair_cell_;   // [T * k] the (expert, rank) cell computing the pair (-1: not computed)
  std::vector<int64_t> home_index_;  // [P] the replica rule's index i of the next pair of each home
  std::vector<int32_t> cell_rows_;   // [(expert, rank) cells] rows of the step
  struct Key {
    uint64_t major, minor;
    int32_t token;
  };
  std::vector<Key> order_;
  std::vector<int64_t> tokens_, rows_, active_, node_rows_, rank_used_;
  // [3][P] the dispatch's rows each rank sends and receives by class: 0 its own (send = receive), 1 NVLink,
  // 2 RDMA.
  std::vector<int64_t> send_, recv_;
  std::vector<int32_t> dest_;  // one token's distinct destination ranks (normal a2a)
  DeployStats s_;
};

}  // namespace moe::sim::deploy
