// ExpertParallelLayer's kGlobal planning (expert_parallel_layer.h): every rank all-gathers every token's
// routing record, plans the global batch identically, and lays out the exchange from the global plan.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "moe/parallel/ep_internal.h"
#include "moe/parallel/expert_parallel_layer.h"

namespace moe::parallel {

using namespace ep_detail;

void ExpertParallelLayer::plan_global(std::span<const TokenMeta> meta, RoutingState* state) {
  const int P = comm_.size(), me = comm_.rank(), E = num_experts(), k = top_k();
  const int R = router_->num_ranked();
  const int64_t Tg = token_offset_[P];
  const int num_tokens = static_cast<int>(counts_[me]);
  auto t0 = Clock::now();
  for (int t = 0; t < num_tokens; ++t) {
    std::byte* rec = records_out_.data() + static_cast<size_t>(t) * record_bytes_;
    std::memcpy(rec, &meta[t].request_id, 8);
    std::memcpy(rec + 8, &meta[t].position, 4);
    std::memcpy(rec + 12, &local_routes_.top1_score[t], 4);
    std::memcpy(rec + 16, &local_routes_.experts[static_cast<size_t>(t) * R], 4 * static_cast<size_t>(R));
    std::memcpy(rec + 16 + 4 * R, &local_routes_.weights[static_cast<size_t>(t) * R],
                4 * static_cast<size_t>(R));
  }
  for (int r = 0; r < P; ++r) record_bytes_per_rank_[r] = counts_[r] * record_bytes_;
  ensure_global(Tg);
  comm_.all_gather_v(records_out_.data(), record_bytes_per_rank_[me], records_in_.data(),
                     record_bytes_per_rank_);
  step_.metadata_bytes_sent = static_cast<int64_t>(record_bytes_per_rank_[me]);
  step_.metadata_bytes_received = Tg * static_cast<int64_t>(record_bytes_);
  step_.metadata_ms = ms_since(t0);
  t0 = Clock::now();

  // 3. The global plan, the same on every rank.
  global_routes_.resize(static_cast<int>(Tg), E, k, R);
  global_meta_.resize(static_cast<size_t>(Tg));
  for (int64_t t = 0; t < Tg; ++t) {
    const std::byte* rec = records_in_.data() + static_cast<size_t>(t) * record_bytes_;
    std::memcpy(&global_meta_[t].request_id, rec, 8);
    std::memcpy(&global_meta_[t].position, rec + 8, 4);
    std::memcpy(&global_routes_.top1_score[t], rec + 12, 4);
    std::memcpy(&global_routes_.experts[static_cast<size_t>(t) * R], rec + 16, 4 * static_cast<size_t>(R));
    std::memcpy(&global_routes_.weights[static_cast<size_t>(t) * R], rec + 16 + 4 * R,
                4 * static_cast<size_t>(R));
  }
  for (int r = 0; r < P; ++r) {
    for (int64_t t = token_offset_[r]; t < token_offset_[r + 1]; ++t) token_home_[t] = r;
  }
  // Throws the same std::invalid_argument on every rank for a batch it rejects (inputs are identical).
  // Without verify_plan, every rank trusts that its inputs equal the others' (they do unless the causal
  // states diverged), so a planner error is the same on every rank. With verify_plan, the planner's outcome
  // (plan hash, or a rejection) is compared across ranks, which also catches a rejection on some ranks only.
  std::string plan_error;
  try {
    planner_->plan(global_routes_, std::span<const TokenMeta>(global_meta_.data(), static_cast<size_t>(Tg)),
                   state, plan_);
  } catch (const std::invalid_argument& e) {
    if (!options_.verify_plan) throw;
    plan_error = e.what();
  }
  if (options_.verify_plan) {
    const size_t hash = std::min<size_t>(static_cast<size_t>(plan_hash(plan_)), kRejected - 1);
    comm_.all_gather_sizes(plan_error.empty() ? hash : kRejected, hash_gather_);
    const std::string rejecting = rank_list(hash_gather_, kRejected);
    int num_rejecting = 0;
    for (size_t h : hash_gather_) num_rejecting += h == kRejected;
    if (num_rejecting == P) throw std::invalid_argument(plan_error);  // the same error everywhere
    std::string differing;
    for (int r = 1; r < P; ++r) {
      if (hash_gather_[r] != hash_gather_[0])
        differing += (differing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (!differing.empty()) {
      throw std::runtime_error(
          "expert parallel layer: rank " + std::to_string(me) + " of " + std::to_string(P) +
          ": the dispatch plan of rank(s) " + differing + " differs from rank 0's" +
          (rejecting.empty() ? std::string() : " (rank(s) " + rejecting + " rejected the batch)") +
          "; the routing states have diverged" + (plan_error.empty() ? "" : ": " + plan_error));
    }
  }
  build_layout();
  step_.plan_ms = ms_since(t0);
}

// NOTES: every rank walks the global slots in one order, ascending (expert, slot). A home rank packs its
// rows for owner o in that order; owner o receives rank h's block in that order too, so both sides agree
// on every row's place without exchanging indices. Results return in the order they were received, so the
// home rank finds pair (t, j)'s result at the same row index it sent it from.
void ExpertParallelLayer::build_layout() {
  const int P = comm_.size(), me = comm_.rank(), E = num_experts(), k = top_k();
  const int64_t my_first = token_offset_[me];
  const int64_t my_tokens = token_offset_[me + 1] - my_first;
  std::fill(send_rows_.begin(), send_rows_.end(), 0);
  std::fill(recv_rows_.begin(), recv_rows_.end(), 0);
  std::fill(local_rows_.begin(), local_rows_.end(), 0);
  // Pass 1: row counts. home_index_[h] = how many kept pairs at e of home h came before (the replica rule).
  for (int e = 0; e < E; ++e) {
    std::fill(home_index_.begin(), home_index_.end(), 0);
    for (int32_t g = plan_.expert_offsets[e]; g < plan_.expert_offsets[e + 1]; ++g) {
      const int home = token_home_[plan_.slot_pairs[g] / k];
      const int dest = placement_.replica_rank(e, home, home_index_[home]++);
      if (home == me) ++send_rows_[dest];
      if (dest == me) {
        ++recv_rows_[home];
        ++local_rows_[e];
      }
    }
  }
  send_row_offset_[0] = recv_row_offset_[0] = 0;
  for (int r = 0; r < P; ++r) {
    send_row_offset_[r + 1] = send_row_offset_[r] + send_rows_[r];
    recv_row_offset_[r + 1] = recv_row_offset_[r] + recv_rows_[r];
    cursor_[r] = send_row_offset_[r];
    cursor_[P + r] = recv_row_offset_[r];
  }
  int64_t base = 0;
  for (int e : local_experts_) {
    local_slot_base_[e] = base;
    base += local_rows_[e];
  }
  // Pass 2: every row's place. A rank's rows of expert e are e's slots it computes, in slot order.
  std::fill(return_row_.begin(), return_row_.begin() + my_tokens * k, -1);
  for (int e = 0; e < E; ++e) {
    std::fill(home_index_.begin(), home_index_.end(), 0);
    int64_t mine = 0;
    for (int32_t g = plan_.expert_offsets[e]; g < plan_.expert_offsets[e + 1]; ++g) {
      const int32_t pair = plan_.slot_pairs[g];
      const int32_t token = pair / k;
      const int home = token_home_[token];
      const int dest = placement_.replica_rank(e, home, home_index_[home]++);
      if (home == me) {
        const int64_t row = cursor_[dest]++;
        send_token_[row] = static_cast<int32_t>(token - my_first);
        send_pair_[row] = pair;
        return_row_[(token - my_first) * k + pair % k] = static_cast<int32_t>(row);
      }
      if (dest == me) {
        const int64_t row = cursor_[P + home]++;
        recv_to_local_[row] = static_cast<int32_t>(local_slot_base_[e] + mine++);
      }
    }
  }
}

}  // namespace moe::parallel
