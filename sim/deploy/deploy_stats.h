// What the deployment accounting (sim/deploy/accounting.h) measured over one policy's steps: per-rank load,
// traffic per link class and the modelled step time.
#pragma once

#include <cstdint>
#include <vector>

namespace moe::sim::deploy {

// A per-step ratio (max over ranks or nodes / their mean), its mean and its largest value over the steps.
struct StepRatio {
  double mean = 0, max = 0;
};

struct DeployStats {
  bool enabled = false;
  int64_t ranks_per_node = 0;
  int64_t dispatch_row_bytes = 0, combine_row_bytes = 0;  // one dispatched / combined row
  std::vector<std::vector<int>>
      replicas;              // per expert: the ranks of its copies (the measured steps' placement)
  int64_t warmup_steps = 0;  // steps whose choices chose the placement (not accounted)
  // The accounted steps and their pairs: dropped by the experts' capacity, by the ranks' capacity, computed.
  int64_t steps = 0, tokens = 0, pairs = 0;
  int64_t expert_dropped = 0, rank_dropped = 0, computed = 0;
  int64_t rank_capacity = 0;  // slots per rank summed over the steps (0: no rank capacity)
  // Per rank, summed over the accounted steps: home tokens, rows computed, and the dispatch's rows - staying
  // on the rank, sent and received over NVLink and over RDMA (combine moves the same rows back) -, modelled
  // GEMM seconds.
  std::vector<int64_t> rank_tokens, rank_rows, rank_local;
  std::vector<int64_t> rank_nvlink_send, rank_nvlink_recv, rank_rdma_send, rank_rdma_recv;
  std::vector<double> rank_gemm_s;
  // Per step, max / mean over ranks of home tokens and of rows computed, and over nodes of rows computed.
  StepRatio token_balance, rank_balance, node_balance;
  // Summed over the steps: the busiest rank's rows sent over NVLink and over RDMA in the dispatch.
  int64_t max_nvlink_send = 0, max_rdma_send = 0;
  // Modelled seconds summed over the steps (each phase: its slowest rank), the largest step, and the GEMM
  // phase if every rank did the mean rank's work (the sum over steps of the mean over ranks).
  double dispatch_s = 0, gemm_s = 0, combine_s = 0, step_s = 0, step_max_s = 0, gemm_mean_s = 0;
};

}  // namespace moe::sim::deploy
