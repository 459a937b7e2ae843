// ExpertParallelLayer's kHome planning (expert_parallel_layer.h): every rank plans its own rows; a step moves
// O(E) counts. Per-request and dropless scopes: the local plan is the global plan of these rows. Batch scope
// (arrival, drop): the rows are a slice of the global batch (router/rules/slice_rules.h): the claim counts
// per (choice rank, expert) go to each expert's first replica, which scans them over the ranks in rank order
// and sends each rank its claims_before. Then every rank tells the ranks computing its kept pairs how many
// rows of each expert they get (the replica rule, ExpertPlacement::replica_rank, on its local slots), and
// the rows follow.
//
// NOTES: the rows of one expert at the rank computing it are laid out home rank by home rank (each home's in
// its slot order), not in the global slot order; with invariant kernels a row's result does not depend on
// the other rows of the call.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "moe/parallel/ep_internal.h"
#include "moe/parallel/expert_parallel_layer.h"
#include "router/rules/capacity.h"
#include "router/rules/slice_rules.h"

namespace moe::parallel {

using namespace ep_detail;

namespace {

int64_t sum(const std::vector<size_t>& v) {
  int64_t s = 0;
  for (size_t x : v) s += static_cast<int64_t>(x);
  return s;
}

}  // namespace

void ExpertParallelLayer::plan_home(std::span<const TokenMeta> meta, RoutingState* state) {
  const int P = comm_.size(), me = comm_.rank(), E = num_experts(), k = top_k();
  const int T = static_cast<int>(counts_[me]);
  auto t0 = Clock::now();
  if (options_.verify_plan) verify_home_rows(meta);
  if (home_slices_) {
    // This slice's claims per (j, e), to each expert's first replica (k per expert, its primary layout).
    std::fill(claims_local_.begin(), claims_local_.end(), 0);
    const rules::RouteArrays routes{local_routes_.experts.data(), local_routes_.weights.data(), k,
                                    local_routes_.num_ranked};
    rules::count_slice_claims(routes, T, E, claims_local_.data());
    for (size_t i = 0; i < primary_expert_.size(); ++i) {
      for (int j = 0; j < k; ++j)
        claims_out_[i * k + j] = claims_local_[static_cast<size_t>(j) * E + primary_expert_[i]];
    }
    comm_.all_to_all_v(claims_out_.data(), claim_send_bytes_, claims_in_.data(), claim_recv_bytes_);
    // As first replica of my experts: each one's exclusive scan over the ranks, back to every rank.
    const int m = primary_begin_[me + 1] - primary_begin_[me];
    for (int i = 0; i < m; ++i) {
      for (int h = 0; h < P; ++h) {
        for (int j = 0; j < k; ++j)
          expert_claims_[h * k + j] = claims_in_[(static_cast<size_t>(h) * m + i) * k + j];
      }
      rules::slice_claims_before(expert_claims_.data(), P, k, expert_before_.data());
      for (int h = 0; h < P; ++h) {
        for (int j = 0; j < k; ++j)
          scan_[(static_cast<size_t>(h) * m + i) * k + j] = expert_before_[h * k + j];
      }
    }
    comm_.all_to_all_v(scan_.data(), claim_recv_bytes_, claims_out_.data(), claim_send_bytes_);
    for (size_t i = 0; i < primary_expert_.size(); ++i) {
      for (int j = 0; j < k; ++j)
        claims_before_[static_cast<size_t>(j) * E + primary_expert_[i]] = claims_out_[i * k + j];
    }
    step_.count_bytes_sent += sum(claim_send_bytes_) + sum(claim_recv_bytes_);
    step_.count_bytes_received += sum(claim_recv_bytes_) + sum(claim_send_bytes_);
  }
  step_.metadata_ms = ms_since(t0);
  t0 = Clock::now();
  if (home_slices_) {
    const int64_t capacity = rules::batch_capacity(config_.policy, token_offset_[P], k, E);
    planner_->plan_slice(local_routes_, meta, claims_before_.data(), capacity, plan_);
  } else {
    planner_->plan(local_routes_, meta, state, plan_);  // checked (and agreed) before the sizes' exchange
  }
  step_.plan_ms = ms_since(t0);
  t0 = Clock::now();
  build_home_layout();
  step_.metadata_ms += ms_since(t0);
}

void ExpertParallelLayer::build_home_layout() {
  const int P = comm_.size(), me = comm_.rank(), E = num_experts(), k = top_k();
  const int T = static_cast<int>(counts_[me]);
  // Where each kept pair goes: the replica rule on its local slot (its index among this home's kept pairs at
  // the expert, in slot order); rows to each destination in (expert, slot) order.
  std::fill(row_count_out_.begin(), row_count_out_.end(), 0);
  std::fill(send_rows_.begin(), send_rows_.end(), 0);
  for (int e = 0; e < E; ++e) {
    for (int32_t s = 0; s < plan_.expert_load[e]; ++s) {
      const int dest = placement_.replica_rank(e, me, s);
      ++row_count_out_[held_begin_[dest] + held_index_[static_cast<size_t>(dest) * E + e]];
      ++send_rows_[dest];
    }
  }
  send_row_offset_[0] = 0;
  for (int r = 0; r < P; ++r) {
    send_row_offset_[r + 1] = send_row_offset_[r] + send_rows_[r];
    cursor_[r] = send_row_offset_[r];
  }
  std::fill(return_row_.begin(), return_row_.begin() + static_cast<int64_t>(T) * k, -1);
  for (int e = 0; e < E; ++e) {
    for (int32_t s = 0; s < plan_.expert_load[e]; ++s) {
      const int32_t pair = plan_.slot_pairs[plan_.expert_offsets[e] + s];
      const int64_t row = cursor_[placement_.replica_rank(e, me, s)]++;
      send_token_[row] = pair / k;
      send_pair_[row] = pair;
      return_row_[pair] = static_cast<int32_t>(row);
    }
  }
  // The row counts per held expert from every home.
  comm_.all_to_all_v(row_count_out_.data(), count_send_bytes_, row_count_in_.data(), count_recv_bytes_);
  step_.count_bytes_sent += sum(count_send_bytes_);
  step_.count_bytes_received += sum(count_recv_bytes_);
  // This rank's rows: expert by expert (ascending), home by home within an expert.
  const int m = static_cast<int>(local_experts_.size());
  int64_t base = 0;
  for (int i = 0; i < m; ++i) {
    const int e = local_experts_[i];
    local_slot_base_[e] = base;
    int64_t rows = 0;
    for (int h = 0; h < P; ++h) rows += row_count_in_[static_cast<size_t>(h) * m + i];
    local_rows_[e] = rows;
    base += rows;
  }
  recv_row_offset_[0] = 0;
  for (int h = 0; h < P; ++h) {
    int64_t rows = 0;
    for (int i = 0; i < m; ++i) rows += row_count_in_[static_cast<size_t>(h) * m + i];
    recv_rows_[h] = rows;
    recv_row_offset_[h + 1] = recv_row_offset_[h] + rows;
  }
  ensure_owner(recv_row_offset_[P]);
  // Home h's block holds its rows of my held experts in ascending order; cursor_[P + i] walks expert i's
  // rows.
  grow(cursor_, static_cast<size_t>(P) + m);
  for (int i = 0; i < m; ++i) cursor_[P + i] = local_slot_base_[local_experts_[i]];
  int64_t row = 0;
  for (int h = 0; h < P; ++h) {
    for (int i = 0; i < m; ++i) {
      const int32_t n = row_count_in_[static_cast<size_t>(h) * m + i];
      for (int32_t q = 0; q < n; ++q) recv_to_local_[row++] = static_cast<int32_t>(cursor_[P + i]++);
    }
  }
}

void ExpertParallelLayer::verify_home_rows(std::span<const TokenMeta> meta) {
  // Every row's request id, with its rank: a request on two ranks breaks kHome's contract.
  const int P = comm_.size(), me = comm_.rank();
  const int64_t Tg = token_offset_[P];
  grow(row_ids_out_, counts_[me]);
  for (size_t t = 0; t < counts_[me]; ++t) row_ids_out_[t] = meta[t].request_id;
  grow(row_ids_in_, static_cast<size_t>(Tg));
  for (int r = 0; r < P; ++r) record_bytes_per_rank_[r] = counts_[r] * sizeof(uint64_t);
  comm_.all_gather_v(row_ids_out_.data(), counts_[me] * sizeof(uint64_t), row_ids_in_.data(),
                     record_bytes_per_rank_);
  std::vector<std::pair<uint64_t, int>> rows(static_cast<size_t>(Tg));
  for (int r = 0; r < P; ++r) {
    for (int64_t t = token_offset_[r]; t < token_offset_[r + 1]; ++t) rows[t] = {row_ids_in_[t], r};
  }
  std::sort(rows.begin(), rows.end());
  for (size_t i = 1; i < rows.size(); ++i) {
    if (rows[i].first == rows[i - 1].first && rows[i].second != rows[i - 1].second) {
      fail("request " + std::to_string(rows[i].first) + " has rows on ranks " +
           std::to_string(rows[i - 1].second) + " and " + std::to_string(rows[i].second) +
           " in one step; home planning needs each request's rows of a step on one rank (or planning "
           "\"global\"); no rank ran the step");
    }
  }
}

}  // namespace moe::parallel
