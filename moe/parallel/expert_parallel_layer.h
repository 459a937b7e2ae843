// moe/parallel/expert_parallel_layer.h: an MoE layer whose routed experts are split over the ranks of a
// Communicator (expert parallelism, docs/expert-parallel.md).
//
// Every rank calls forward() with its own tokens. The step:
//   1. route    gate GEMM + TopKRouter on the rank's own tokens (the kernels MoELayer uses);
//   2. gather   all_gather_v of the routing metadata (per token: TokenMeta, top-1 score, ranked experts
//               and weights: 16 + 8 * num_ranked bytes); the *global batch* is the ranks' tokens
//               concatenated in rank order;
//   3. plan     DispatchPlanner on the global batch, identically on every rank (capacity, priority and
//               greedy arrival order are exactly those of one process on the concatenated batch);
//   4. dispatch the hidden rows of kept pairs go to their experts' owners (all_to_all_v), each block in
//               ascending (expert, slot) order;
//   5. experts  owners run kernels::ffn_forward on their rows, one call per expert over all of its slots in
//               slot order (the same call MoELayer makes);
//   6. return   results come back with all_to_all_v in the order they were sent;
//   7. combine  the home rank combines with moe::combine_row in fixed j order, plus the shared expert
//               (replicated on every rank) on its own tokens.
//
// Guarantee: with invariant kernels (expert and gate), y on every rank is bitwise equal to the matching rows
// of a single-process MoELayer run on the global batch with the same config, weights and causal state, for
// any world size, placement, per-rank token split (a rank may have 0 tokens) and thread count. With fast
// kernels, the plan and the expert rows still match when the logits match, but the gate GEMM and the shared
// expert run on the local rows only and may round differently from a run on the global batch.
//
// Causal and sequence scopes: every rank keeps the *global* RoutingState (all requests of all ranks), since
// every rank plans the global batch; the states stay equal because every rank applies the same plans.
// Requests must be admitted (sequence scope) and released on every rank alike: admit_requests() and
// release_requests() do it collectively.
//
// Memory: host memory only (Communicator::memory_space() must be kHost: the single-process and MPI
// backends). A GPU layer plugs in the NCCL backend through the same byte interface (see
// docs/expert-parallel.md). The constructor sizes the workspace for config.max_tokens local tokens per rank
// (world_size * max_tokens global); forward() allocates nothing after warm-up for batches within it (a
// larger one grows the workspace once). The communicator's collectives allocate nothing either.
//
// Errors: see forward(). Threading: forward() is not reentrant; one thread per layer, and it must be the
// thread that may call the communicator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/thread_pool.h"
#include "moe/io/layer_weights.h"
#include "moe/layer/fingerprint.h"
#include "moe/layer/layer.h"
#include "moe/layer/moe_layer.h"
#include "moe/layer/moe_layer_config.h"
#include "moe/parallel/communicator.h"
#include "moe/parallel/expert_placement.h"
#include "router/dispatch_plan.h"
#include "router/dispatch_planner.h"
#include "router/routing_state.h"
#include "router/token_meta.h"
#include "router/topk_router.h"

namespace moe {
class ExpertFfns;  // moe/layer/expert_ffns.h
}  // namespace moe

namespace moe::parallel {

struct ExpertParallelOptions {
  // After planning, all-gather a hash of the plan (8 bytes per rank) and throw std::runtime_error naming the
  // ranks whose plan differs from rank 0's. Catches ranks whose causal states diverged. Off by default.
  bool verify_plan = false;
};

// What the last forward() did on this rank: wall time per phase and bytes moved.
struct ExpertParallelStepStats {
  int64_t local_tokens = 0;
  int64_t global_tokens = 0;
  // Milliseconds (steady clock) of each phase. A collective's time includes waiting for the slowest peer.
  //   route     gate GEMM + router + packing the routing records
  //   metadata  token-count exchange + all-gather of the records
  //   plan      unpacking, DispatchPlanner on the global batch, (verify_plan), exchange layout
  //   dispatch  packing + all_to_all_v + unpacking of hidden rows
  //   experts   this rank's routed expert FFNs
  //   return    packing results + all_to_all_v back
  //   shared    shared expert (and its gate) on the local rows
  //   combine   combine_row per local token
  double route_ms = 0, metadata_ms = 0, plan_ms = 0, dispatch_ms = 0, experts_ms = 0, return_ms = 0,
         shared_ms = 0, combine_ms = 0;
  // Metadata bytes this rank received in the all-gather (its own included), and sent (its own records).
  int64_t metadata_bytes_received = 0;
  int64_t metadata_bytes_sent = 0;
  // Hidden rows this rank sent in the dispatch (all destinations / other ranks only); the same counts come
  // back in the return. Rows are fp32: bytes = rows * hidden * 4.
  int64_t rows_sent = 0;
  int64_t rows_sent_remote = 0;
  // Rows this rank's experts computed.
  int64_t rows_computed = 0;
};

// A 64-bit hash of a plan's integers and weights (shape, per-pair expert/slot/weight bits/status, per-expert
// load/capacity/offsets, slot_pairs, counts). Equal plans hash equal on every machine.
uint64_t plan_hash(const DispatchPlan& plan);

class ExpertParallelLayer final : public Layer {
 public:
  // Collective: every rank of `comm` constructs its layer at the same time.
  //   config:    as for MoELayer (validated against the weights the same way).
  //   weights:   the full layer on every rank; this rank reads only its own experts, the gate and the
  //              shared expert.
  //   comm:      borrowed, must outlive the layer; host memory (kHost).
  //   placement: expert -> rank; nullopt = ExpertPlacement::contiguous(E, comm.size()).
  // Start-up checks, in this order, on every rank:
  //   - local validation (config vs weights, placement vs E and world size, memory space); if any rank
  //     fails, every rank throws std::invalid_argument: the failing rank with its own message, the others
  //     naming the failing ranks;
  //   - Communicator::check_consistent on MoELayerConfig::config_hash() ("layer config"),
  //     LayerWeights::content_hash() ("layer weights") and ExpertPlacement::hash() ("expert placement"):
  //     std::runtime_error on every rank naming the ranks that differ from rank 0.
  // Communication failures and timeouts throw std::runtime_error.
  ExpertParallelLayer(MoELayerConfig config, std::shared_ptr<const io::LayerWeights> weights,
                      Communicator& comm, std::optional<ExpertPlacement> placement = std::nullopt,
                      ExpertParallelOptions options = {});
  ~ExpertParallelLayer();
  ExpertParallelLayer(const ExpertParallelLayer&) = delete;
  ExpertParallelLayer& operator=(const ExpertParallelLayer&) = delete;

  // Collective. x: [num_tokens, hidden] fp32 rows of this rank's tokens (num_tokens may be 0); meta: one
  // entry per row; y: [num_tokens, hidden], overwritten, must not overlap x. state: the global causal state
  // (see above; may be null as for DispatchPlanner::plan); stats: the *global* batch's routing outcome.
  // Errors:
  //   - std::invalid_argument, on every rank, when any rank's input is bad (null pointers, meta length, a
  //     row with no finite gate logit): the bad rank reports its own message, the others name it; or when
  //     the planner rejects the global batch (e.g. duplicate (request_id, position) across ranks, a causal
  //     request that is not contiguous): the same message on every rank. y and state are unchanged.
  //   - std::runtime_error: communication failure or timeout (a peer died or is stuck), or a plan mismatch
  //     under verify_plan. The communicator is then broken; y is unspecified and the causal state may have
  //     advanced: the caller aborts (Communicator::abort).
  void forward(const float* x, int num_tokens, std::span<const TokenMeta> meta, float* y,
               RoutingState* state = nullptr, MoEStats* stats = nullptr) override;

  // Collective: every rank passes the requests it saw finish (any may pass none); every rank then releases
  // the union (a request named by several ranks once) from `state`, so the global states stay equal.
  // Allocates (not a hot-path call). Throws std::invalid_argument on every rank alike, releasing nothing,
  // when `state` does not hold one of them.
  void release_requests(std::span<const uint64_t> finished, RoutingState& state);
  // Collective: every rank passes the requests it admits (id, prompt length; any may pass none); every rank
  // then admits the union into `state`. Throws std::invalid_argument on every rank alike, admitting nothing,
  // for a prompt length of 0, a request `state` already holds or one admitted twice in the call.
  struct Admission {
    uint64_t request_id = 0;
    uint32_t prompt_length = 0;
  };
  void admit_requests(std::span<const Admission> admitted, RoutingState& state);
  // Collective: every rank passes the requests it restores from its prefix cache (id, prompt length, the
  // cached routing segments of positions [0, P): RoutingState::restore; any may pass none); every rank then
  // restores the union into `state`. Throws std::invalid_argument on every rank alike, restoring nothing,
  // for what RoutingState::restore refuses or a request restored twice in the call.
  struct Restoration {
    uint64_t request_id = 0;
    uint32_t prompt_length = 0;
    std::vector<RoutingSegment> prefix;
  };
  void restore_requests(std::span<const Restoration> restored, RoutingState& state);
  // Collective: every rank passes the requests it rolls back (id, position: RoutingState::rollback, e.g. a
  // speculative step's rejected draft tokens; any may pass none); every rank then rolls back the union.
  // Throws std::invalid_argument on every rank alike, rolling back nothing, for what RoutingState::rollback
  // refuses or a request named twice in the call.
  struct Rollback {
    uint64_t request_id = 0;
    uint32_t position = 0;
  };
  void rollback_requests(std::span<const Rollback> rollbacks, RoutingState& state);

  const MoELayerConfig& config() const override { return config_; }
  const io::LayerWeights& weights() const override { return *weights_; }
  const ExpertPlacement& placement() const { return placement_; }
  Communicator& communicator() const { return comm_; }
  int64_t hidden() const override { return hidden_; }
  // The experts this rank computes, ascending.
  const std::vector<int>& local_experts() const { return local_experts_; }

  // The global plan of the last forward() (identical on every rank), valid until the next call.
  const DispatchPlan& last_plan() const { return plan_; }
  const DispatchPlan& last_plan() override { return plan_; }
  // Row of this rank's first token in the last global batch, and that batch's size.
  int64_t last_token_offset() const { return token_offset_[comm_.rank()]; }
  int64_t last_global_tokens() const { return token_offset_[comm_.size()]; }
  const ExpertParallelStepStats& last_step() const { return step_; }
  // Bytes of metadata per token in the all-gather: 16 + 8 * num_ranked.
  size_t record_bytes() const { return record_bytes_; }
  // Bytes of workspace held now.
  size_t workspace_bytes() const;
  // Provenance: as MoELayer's, with world_size = comm.size().
  Fingerprint fingerprint() const override;

 private:
  void ensure_local(int num_tokens);
  void ensure_global(int64_t global_tokens);
  void build_layout();
  void run_experts();

  MoELayerConfig config_;
  std::shared_ptr<const io::LayerWeights> weights_;
  Communicator& comm_;
  ExpertPlacement placement_;
  ExpertParallelOptions options_;
  int64_t hidden_ = 0;
  std::unique_ptr<moe::ExpertFfns> ffns_;  // this rank's experts and the shared expert
  bool has_shared_ = false;
  std::vector<int> local_experts_;
  // Built after validation (the constructor agrees on errors collectively before anything can throw).
  std::optional<kernels::ThreadPool> pool_;
  std::optional<TopKRouter> router_;
  std::optional<DispatchPlanner> planner_;
  size_t record_bytes_ = 0;
  ExpertParallelStepStats step_;

  // Per-rank sizes (host), size() or size() + 1 entries.
  std::vector<size_t> counts_;         // tokens per rank (all_gather_sizes)
  std::vector<int64_t> token_offset_;  // prefix sums of counts_
  std::vector<size_t> record_bytes_per_rank_;
  std::vector<int64_t> send_rows_, recv_rows_;              // dispatch rows to / from each rank
  std::vector<int64_t> send_row_offset_, recv_row_offset_;  // prefix sums, size() + 1
  std::vector<int64_t> cursor_;
  std::vector<size_t> send_bytes_, recv_bytes_;  // dispatch byte counts (return swaps them)
  std::vector<size_t> hash_gather_;

  // Local workspace (grown to the largest local batch).
  int local_capacity_ = 0;
  std::vector<float> logits_;           // [T_local, E]
  TokenRoutes local_routes_;            // [T_local]
  std::vector<std::byte> records_out_;  // [T_local * record_bytes]
  std::vector<int32_t> return_row_;     // [T_local * k] row of pair (t, j) in home_rows_ (-1 if dropped)
  std::vector<int32_t> send_token_;     // [T_local * k] local token of each dispatch send row
  std::vector<int32_t> send_pair_;      // [T_local * k] global pair of each dispatch send row
  std::vector<float> home_rows_;        // [T_local * k, hidden] dispatch send, then return receive
  std::vector<float> shared_out_;       // [T_local, hidden]
  std::vector<float> shared_gate_logit_;

  // Global workspace (grown to the largest global batch).
  int64_t global_capacity_ = 0;
  std::vector<std::byte> records_in_;  // [T_global * record_bytes]
  TokenRoutes global_routes_;
  std::vector<TokenMeta> global_meta_;
  std::vector<int32_t> token_home_;  // [T_global] rank of each global token
  DispatchPlan plan_;

  // Owner workspace (grown to the most rows this rank's experts received).
  std::vector<int64_t> local_slot_base_;  // [E] first local row of each owned expert (-1 if not owned)
  std::vector<int64_t> local_rows_;       // [E] rows this rank computes for each expert (its replica's share)
  std::vector<int64_t> home_index_;       // [P] kept pairs of each home seen so far at one expert
  std::vector<int32_t> recv_to_local_;    // [rows received] local row of each received row
  std::vector<float> owner_rows_;         // [rows, hidden] dispatch receive, then return send
  std::vector<float> gathered_;           // [rows, hidden] in (owned expert, slot) order
  std::vector<float> expert_out_;         // [rows, hidden]
  std::vector<float> scratch_;
  size_t per_thread_scratch_ = 0;
  std::vector<int> active_experts_;
};

}  // namespace moe::parallel
