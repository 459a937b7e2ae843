// moe/parallel/expert_parallel_layer.h: an MoE layer whose routed experts are split over the ranks of a
// Communicator (expert parallelism, docs/expert-parallel.md). Each rank holds only what it computes: its
// experts (with their replicas, ExpertPlacement), the router gate and the shared expert.
//
// Every rank calls forward() with its own tokens; the *global batch* is the ranks' rows concatenated in rank
// order. Two ways to plan it (ExpertParallelOptions::planning):
//
//   kGlobal  every rank all-gathers every token's routing record (16 + 8 * num_ranked bytes) and runs the
//            DispatchPlanner on the global batch, identically: any row may sit on any rank (a request's rows
//            may be split over ranks and move between them), and every rank keeps the *global* RoutingState.
//            O(global batch) metadata and planning per rank.
//   kHome    every rank plans its own rows alone ("home" rank planning): a step moves O(E) counts plus the
//            kept rows, whatever the world size. Under the per-request scopes (request, causal, sequence,
//            prefix) and dropless scope the home rank's plan of its rows is the global plan's; under batch
//            scope with arrival priority and drop a rank plans its rows as a slice of the global batch from
//            an exclusive scan of per-expert claim counts (router/rules/slice_rules.h). Contract: within one
//            step a request's rows are all on one rank (per-request scopes), and each rank's RoutingState
//            holds the requests it plans (admit, release, restore and roll back on the request's rank). Batch
//            scope with score or random or request priority, or with reroute, needs the whole batch: such a
//            layer plans as kGlobal (plans_locally() says which).
//
// The step: route (gate GEMM + TopKRouter on the rank's rows) -> plan (above) -> dispatch (the hidden rows of
// kept pairs to the rank computing each pair - its expert's replica by ExpertPlacement::replica_rank -,
// all_to_all_v) -> experts (kernels::ffn_forward once per held expert over its rows) -> return (all_to_all_v
// back) -> combine (moe::combine_row in fixed j order at home, plus the shared expert on the rank's rows).
//
// Guarantee: with invariant kernels (expert and gate), y on every rank is bitwise equal to the matching rows
// of a single-process MoELayer run on the global batch with the same config, weights and causal state, for
// any world size, placement (replicas included), per-rank token split (a rank may have 0 tokens) and thread
// count - under kHome for splits that keep each request's rows of a step on one rank (per-request scopes).
// With fast kernels, the plan and the expert rows still match when the logits match, but the gate GEMM and
// the shared expert run on the local rows only and may round differently from a run on the global batch.
//
// Memory: host memory only (Communicator::memory_space() must be kHost: the single-process and MPI backends;
// HostStagedCommunicator puts the NCCL transport under it). forward() allocates nothing after warm-up for
// batches within config.max_tokens local rows (a larger batch, or more rows to compute than seen before,
// grows the workspace once). The communicator's collectives allocate nothing either.
//
// Errors: see forward(). Threading: forward() is not reentrant; one thread per layer, and it must be the
// thread that may call the communicator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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

// How the ranks plan a step (see the top of this file).
enum class EpPlanning { kGlobal, kHome };
std::string_view to_string(EpPlanning p);
// "global" or "home"; anything else is std::invalid_argument naming both.
EpPlanning parse_ep_planning(std::string_view s);

struct ExpertParallelOptions {
  // kGlobal: after planning, all-gather a hash of the plan (8 bytes per rank) and throw std::runtime_error
  // naming the ranks whose plan differs from rank 0's (catches ranks whose causal states diverged).
  // kHome: all-gather every row's request id and throw std::invalid_argument on every rank, naming the
  // request and its ranks, when a request's rows of the step sit on two ranks (the contract; O(global batch)
  // bytes: a debugging aid). Off by default.
  bool verify_plan = false;
  EpPlanning planning = EpPlanning::kGlobal;
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
  //   metadata  token-count exchange + all-gather of the records (kGlobal), or the exchanges of counts
  //   (kHome)
  double route_ms = 0, metadata_ms = 0, plan_ms = 0, dispatch_ms = 0, experts_ms = 0, return_ms = 0,
         shared_ms = 0, combine_ms = 0;
  bool planned_locally = false;  // kHome planning (plans_locally())
  // Bytes of the step's small exchanges, this rank's (sent / received, its own share included), apart from
  // the hidden rows:
  //   sizes     the token-count all-gather that opens every step: 8 bytes per rank received (8 sent)
  //   metadata  kGlobal: the routing records' all-gather (every token's record received)
  //   counts    kHome: per-expert row counts to the ranks computing them (one 4-byte count per expert a
  //             destination holds), and under batch scope the claim counts to each expert's first replica
  //             and their exclusive scans back (8 bytes per (expert, choice rank) each way): O(E), whatever
  //             the world size
  int64_t size_bytes_sent = 0, size_bytes_received = 0;
  int64_t metadata_bytes_received = 0;
  int64_t metadata_bytes_sent = 0;
  int64_t count_bytes_sent = 0, count_bytes_received = 0;
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
  //   weights:   this rank's part (io::LayerWeights holding at least the experts the placement gives this
  //              rank: random_layer, load_layer or weights_from_views with an io::ExpertSet, or the whole
  //              layer); the rank reads only its experts, the gate and the shared expert.
  //   comm:      borrowed, must outlive the layer; host memory (kHost).
  //   placement: expert -> the ranks holding it (replicas); nullopt = ExpertPlacement::contiguous(E, size).
  // Start-up checks, in this order, on every rank:
  //   - local validation (config vs weights, placement vs E and world size, the weights hold this rank's
  //     experts, memory space); if any rank fails, every rank throws std::invalid_argument: the failing rank
  //     with its own message, the others naming the failing ranks;
  //   - Communicator::check_consistent on MoELayerConfig::config_hash() ("layer config"), the replicated
  //     part's hash (LayerWeights::replicated_hash: "layer weights") and ExpertPlacement::hash() ("expert
  //     placement"), then every expert's hash (LayerWeights::expert_hash) from each rank holding it: the
  //     replicas of an expert must agree ("layer weights: expert 5 differs across its replicas: ..."), all
  //     std::runtime_error on every rank naming the ranks that differ. The combination of the pieces'
  //     hashes (io::sharded_hash) is the layer's weights hash (fingerprint()), whatever the sharding.
  // Communication failures and timeouts throw std::runtime_error.
  ExpertParallelLayer(MoELayerConfig config, std::shared_ptr<const io::LayerWeights> weights,
                      Communicator& comm, std::optional<ExpertPlacement> placement = std::nullopt,
                      ExpertParallelOptions options = {});
  // The same, with each rank reading its part through `read` (any checkpoint reader's "load these experts of
  // layer i": io::pretrained_part_reader, io::file_part_reader, ...): called once, on every rank, with the
  // experts the placement gives that rank. A reader that throws (a missing tensor, io::OutOfMemory) fails
  // every rank as local validation does.
  ExpertParallelLayer(MoELayerConfig config, const io::LayerPartReader& read, Communicator& comm,
                      std::optional<ExpertPlacement> placement = std::nullopt,
                      ExpertParallelOptions options = {});
  // Collective: layer `layer_index` of a Hugging Face checkpoint directory, each rank reading only its part;
  // the config is MoELayerConfig::pretrained(preset, the directory's config.json).
  static std::unique_ptr<ExpertParallelLayer> from_pretrained(
      const std::filesystem::path& dir, int layer_index, std::string_view preset, Communicator& comm,
      std::optional<ExpertPlacement> placement = std::nullopt, ExpertParallelOptions options = {},
      std::optional<kernels::DType> storage = std::nullopt);
  ~ExpertParallelLayer();
  ExpertParallelLayer(const ExpertParallelLayer&) = delete;
  ExpertParallelLayer& operator=(const ExpertParallelLayer&) = delete;

  // Collective. x: [num_tokens, hidden] fp32 rows of this rank's tokens (num_tokens may be 0); meta: one
  // entry per row; y: [num_tokens, hidden], overwritten, must not overlap x. state: the routing state
  // (kGlobal: the global one, equal on every rank; kHome: this rank's requests'; may be null as for
  // DispatchPlanner::plan); stats: the routing outcome of the *global* batch (kGlobal) or of this rank's rows
  // (plans_locally(): sum them over the ranks for the global batch's).
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

  // Request lifecycle calls. kGlobal: as below, every rank applies the union of what the ranks pass (the
  // global states stay equal). Under kHome planning (plans_locally()) each rank applies what it passes to its
  // own state only (its requests), and the calls stay collective only to report an error on every rank alike
  // (one 8-byte all-gather): the failing rank with its message, the others naming it; nothing is applied.
  //
  // Collective: every rank passes the requests it saw finish (any may pass none); every rank then releases
  // the union (a request named by several ranks once) from `state`, so the global states stay equal.
  // Allocates (not a hot-path call). Throws std::invalid_argument on every rank alike, releasing nothing,
  // when `state` does not hold one of them.
  void release_requests(std::span<const uint64_t> finished, RoutingState& state);
  // Collective: every rank passes the requests it admits (id, prompt length or a conversation's turn ends;
  // any may pass none); every rank then admits the union into `state`. Throws std::invalid_argument on every
  // rank alike, admitting nothing, for a prompt length of 0, invalid turn ends (or ones whose last is not the
  // prompt length), a request `state` already holds or one admitted twice in the call.
  // turn_ends: a conversation's turn (RoutingState::admit(id, turn_ends); the last one is prompt_length);
  // empty for a single turn.
  struct Admission {
    uint64_t request_id = 0;
    uint32_t prompt_length = 0;
    std::vector<uint32_t> turn_ends{};
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
    std::vector<uint32_t> turn_ends{};  // as Admission's
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
  // This rank's weights (its part, or the whole layer), shared.
  const std::shared_ptr<const io::LayerWeights>& weights_ptr() const { return weights_; }
  const ExpertPlacement& placement() const { return placement_; }
  Communicator& communicator() const { return comm_; }
  int64_t hidden() const override { return hidden_; }
  // The experts this rank computes, ascending.
  const std::vector<int>& local_experts() const { return local_experts_; }

  // The plan of the last forward(), valid until the next call: kGlobal, the global batch's (identical on
  // every rank); kHome (plans_locally()), this rank's rows' (pairs t * k + j of its own rows; slots count its
  // own kept pairs, in the global slot order under batch scope).
  const DispatchPlan& last_plan() const { return plan_; }
  const DispatchPlan& last_plan() override { return plan_; }
  // Whether forward() plans this rank's rows alone (kHome with a policy that allows it).
  bool plans_locally() const { return home_; }
  const ExpertParallelOptions& options() const { return options_; }
  // Row of this rank's first token in the last global batch, and that batch's size.
  int64_t last_token_offset() const { return token_offset_[comm_.rank()]; }
  int64_t last_global_tokens() const { return token_offset_[comm_.size()]; }
  const ExpertParallelStepStats& last_step() const { return step_; }
  // Bytes of metadata per token in the all-gather: 16 + 8 * num_ranked.
  size_t record_bytes() const { return record_bytes_; }
  // Bytes of workspace held now.
  size_t workspace_bytes() const;
  // Provenance: as MoELayer's, with world_size = comm.size() and the weights hash io::sharded_hash of the
  // layer's pieces (the same for every sharding of the same weights).
  Fingerprint fingerprint() const override;

 private:
  // The constructors' common part: local validation (reading the part when `read`), agreed collectively.
  void init(MoELayerConfig config, const io::LayerPartReader* read, std::optional<ExpertPlacement> placement);
  void check_weights_across_ranks();
  void ensure_local(int num_tokens);
  void ensure_global(int64_t global_tokens);
  void ensure_owner(int64_t rows);
  // kGlobal: gather the records, plan the global batch, lay out the exchange from the global plan.
  void plan_global(std::span<const TokenMeta> meta, RoutingState* state);
  void build_layout();
  // kHome: the slice claims' exchange (batch scope), the local plan, the exchange of row counts.
  void plan_home(std::span<const TokenMeta> meta, RoutingState* state);
  void verify_home_rows(std::span<const TokenMeta> meta);
  void build_home_layout();
  void run_experts();
  // kHome lifecycle calls: `apply` checks (throws std::invalid_argument) when `dry`, else changes the state;
  // collective agreement on the outcome of the dry run first.
  template <class Apply>
  void local_lifecycle(Apply&& apply);

  MoELayerConfig config_;
  std::shared_ptr<const io::LayerWeights> weights_;
  Communicator& comm_;
  ExpertPlacement placement_;
  ExpertParallelOptions options_;
  bool home_ = false;          // kHome planning of this policy
  bool home_slices_ = false;   // ... as slices of a batch-scope plan (claim counts exchanged)
  uint64_t weights_hash_ = 0;  // io::sharded_hash of the pieces, agreed at start-up
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

  // kHome exchange layouts, fixed by the placement at construction. held(o): the experts rank o holds,
  // ascending (held_begin_[o] .. held_begin_[o + 1] in held_expert_); primary(o): the experts whose first
  // replica is on o, ascending (primary_begin_, primary_expert_).
  std::vector<int32_t> held_begin_, held_expert_, primary_begin_, primary_expert_;
  std::vector<int32_t> held_index_;  // [P * E]: e's index in held(o), -1 if o does not hold it
  std::vector<int32_t> row_count_out_, row_count_in_;  // [sum_o |held(o)|], [P * |held(me)|]
  std::vector<size_t> count_send_bytes_, count_recv_bytes_, claim_send_bytes_, claim_recv_bytes_;
  std::vector<int64_t> claims_local_, claims_before_;   // [k * E]
  std::vector<int64_t> claims_out_, claims_in_, scan_;  // primary layout (k per expert)
  std::vector<int64_t> expert_claims_, expert_before_;  // [P * k] one expert's claims and scan
  std::vector<int64_t> home_rows_to_;                   // [P * E] rows to each rank per expert
  std::vector<uint64_t> row_ids_out_, row_ids_in_;      // verify_plan under kHome

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
