#include "sim/deploy/accounting.h"

#include <algorithm>
#include <cmath>

#include "router/rules/sort_keys.h"
#include "sim/deploy/placement.h"
#include "sim/deploy/step_cost.h"

namespace moe::sim::deploy {
namespace {

void zero(std::vector<int64_t>& v) {
  std::fill(v.begin(), v.end(), 0);
}

// max / mean of n values summing to `sum` with the largest `max` (0 when nothing was counted).
double balance(int64_t max, int64_t sum, int64_t n) {
  return sum > 0 ? static_cast<double>(max) * static_cast<double>(n) / static_cast<double>(sum) : 0.0;
}

void fold(StepRatio& r, double v) {
  r.mean += v;  // a sum until result() divides by the steps
  r.max = std::max(r.max, v);
}

}  // namespace

DeployAccounter::DeployAccounter(const DeployConfig& config, int num_experts, int top_k, int num_groups,
                                 const DispatchPolicy& policy)
    : config_(config), num_experts_(num_experts), top_k_(top_k), num_groups_(num_groups), policy_(policy) {
  const size_t P = static_cast<size_t>(config_.ep_size);
  for (auto* v : {&tokens_, &rows_, &active_, &home_index_, &rank_used_}) v->assign(P, 0);
  send_.assign(3 * P, 0);
  recv_.assign(3 * P, 0);
  node_of_.resize(P);
  for (size_t r = 0; r < P; ++r)
    node_of_[r] = static_cast<int32_t>(r / static_cast<size_t>(config_.ranks_per_node));
  node_rows_.assign(static_cast<size_t>(config_.nodes()), 0);
  s_.enabled = true;
  s_.ranks_per_node = config_.ranks_per_node;
  s_.dispatch_row_bytes = row_bytes(config_.dispatch, config_.model.hidden);
  s_.combine_row_bytes = row_bytes(config_.combine, config_.model.hidden);
  for (auto* v : {&s_.rank_tokens, &s_.rank_rows, &s_.rank_local, &s_.rank_nvlink_send, &s_.rank_nvlink_recv,
                  &s_.rank_rdma_send, &s_.rank_rdma_recv}) {
    v->assign(P, 0);
  }
  s_.rank_gemm_s.assign(P, 0.0);
  if (balances_loads(config_.placement) && config_.loads != "warmup") {
    file_loads_ = read_loads(config_.loads, num_experts_);
  }
  if (config_.warmup_steps == 0) {
    set_placement(file_loads_);
  } else {
    warm_load_.assign(static_cast<size_t>(num_experts_), 0);
  }
}

void DeployAccounter::set_placement(std::span<const float> loads) {
  placement_ = make_placement(config_, num_experts_, num_groups_, loads);
  const int E = num_experts_;
  single_cell_.assign(E, -1);
  distinct_ranks_.assign(E, {});
  cell_base_.assign(E, 0);
  cell_rank_.clear();
  replicated_.clear();
  s_.replicas.clear();
  int32_t cells = 0;
  for (int e = 0; e < E; ++e) {
    const std::vector<int>& r = placement_->replicas(e);
    s_.replicas.push_back(r);
    std::vector<int32_t>& d = distinct_ranks_[e];
    for (int rank : r) {
      if (std::find(d.begin(), d.end(), rank) == d.end()) d.push_back(rank);
    }
    if (r.size() == 1) {
      single_cell_[e] = cells;
    } else {
      replicated_.push_back(e);
    }
    cell_base_[e] = cells;
    cells += static_cast<int32_t>(d.size());
    cell_rank_.insert(cell_rank_.end(), d.begin(), d.end());
  }
  cell_rows_.assign(static_cast<size_t>(cells), 0);
}

void DeployAccounter::add(std::span<const TokenMeta> rows, const TokenRoutes& routes,
                          const DispatchPlan& plan) {
  const int T = plan.num_tokens;
  if (!placement_) {
    // Warm-up: the router's choices are the experts' loads.
    for (int t = 0; t < T; ++t) {
      for (int j = 0; j < top_k_; ++j) {
        const int32_t e = routes.expert(t, j);
        if (e >= 0) ++warm_load_[e];
      }
    }
    if (++warm_steps_ == config_.warmup_steps) {
      const std::vector<float> measured(warm_load_.begin(), warm_load_.end());
      set_placement(config_.loads == "warmup" ? measured : file_loads_);
    }
    return;
  }
  if (T == 0) return;
  s_.expert_dropped += plan.num_dropped;
  assign_homes(rows, T);
  assign_ranks(plan);
  if (config_.rank_capacity_factor > 0) apply_rank_capacity(rows, routes, T);
  count_traffic(T);
  fold_step(T);
}

void DeployAccounter::assign_homes(std::span<const TokenMeta> rows, int T) {
  const int P = config_.ep_size;
  home_.resize(static_cast<size_t>(T));
  if (config_.homes == TokenHomes::kRequests) {
    for (int t = 0; t < T; ++t)
      home_[t] = static_cast<int32_t>(rows[t].request_id % static_cast<uint64_t>(P));
    return;
  }
  for (int h = 0; h < P; ++h) {  // rank h holds rows [T h / P, T (h + 1) / P)
    const int64_t begin = static_cast<int64_t>(T) * h / P, end = static_cast<int64_t>(T) * (h + 1) / P;
    std::fill(home_.begin() + begin, home_.begin() + end, h);
  }
}

void DeployAccounter::assign_ranks(const DispatchPlan& plan) {
  const int k = top_k_;
  const int64_t pairs = plan.num_pairs();
  pair_cell_.resize(static_cast<size_t>(pairs));
  const int32_t* expert = plan.pair_expert.data();
  const int32_t* single = single_cell_.data();
  int32_t* cell = pair_cell_.data();
  for (int64_t p = 0; p < pairs; ++p) {
    const int32_t e = expert[p];
    cell[p] = e >= 0 ? single[e] : -1;
  }
  // Replicated experts: the replica rule over each home's kept pairs at the expert in slot order, then the
  // (expert, rank) cell of the rank it gives.
  for (int32_t e : replicated_) {
    const int32_t* slot = plan.slot_pairs.data() + plan.expert_offsets[e];
    const int32_t load = plan.expert_load[e];
    const std::vector<int32_t>& d = distinct_ranks_[e];
    for (int32_t s = 0; s < load; ++s) {
      const int32_t h = home_[slot[s] / k];
      const int rank = placement_->replica_rank(e, h, home_index_[h]++);
      cell[slot[s]] = cell_base_[e] + static_cast<int32_t>(std::find(d.begin(), d.end(), rank) - d.begin());
    }
    for (int32_t s = 0; s < load; ++s) home_index_[home_[slot[s] / k]] = 0;
  }
}

void DeployAccounter::apply_rank_capacity(std::span<const TokenMeta> rows, const TokenRoutes& routes, int T) {
  const int P = config_.ep_size, k = top_k_;
  const double nominal = config_.rank_capacity_factor * static_cast<double>(T) * k / P;
  const int64_t capacity = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(nominal)));
  s_.rank_capacity += capacity;
  // The claiming order: choice-major, and within a choice the tokens in the policy's priority order
  // (arrival: rows; request: (request id, position); score: highest top-1 score first; random: the seeded
  // key of the token's identity), ties by row.
  order_.resize(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) {
    Key key{0, 0, t};
    switch (policy_.priority) {
      case Priority::kArrival:
        break;
      case Priority::kRequest:
        key.major = rows[t].request_id;
        key.minor = rows[t].position;
        break;
      case Priority::kScore:
        key.major = rules::descending_key(routes.top1_score[t]);
        break;
      case Priority::kRandom:
        key.major = rules::random_priority_key(policy_.seed, rows[t].request_id, rows[t].position);
        break;
    }
    order_[t] = key;
  }
  if (policy_.priority != Priority::kArrival) {
    std::sort(order_.begin(), order_.end(), [](const Key& a, const Key& b) {
      if (a.major != b.major) return a.major < b.major;
      if (a.minor != b.minor) return a.minor < b.minor;
      return a.token < b.token;
    });
  }
  zero(rank_used_);
  for (int j = 0; j < k; ++j) {
    for (const Key& key : order_) {
      int32_t& cell = pair_cell_[static_cast<int64_t>(key.token) * k + j];
      if (cell < 0) continue;
      int64_t& used = rank_used_[cell_rank_[cell]];
      if (used < capacity) {
        ++used;
      } else {
        cell = -1;
        ++s_.rank_dropped;
      }
    }
  }
}

void DeployAccounter::count_traffic(int T) {
  const int k = top_k_, P = config_.ep_size, G = config_.ranks_per_node;
  for (auto* v : {&tokens_, &send_, &recv_, &active_}) zero(*v);
  std::fill(cell_rows_.begin(), cell_rows_.end(), 0);
  const int32_t* node = node_of_.data();
  const int32_t* cell_rank = cell_rank_.data();
  int64_t* send = send_.data();
  int64_t* recv = recv_.data();
  if (config_.a2a == A2aKind::kLowLatency) {
    // A message per computed pair, of class 0 (its home), 1 (NVLink: its node) or 2 (RDMA), without
    // branches on the class.
    const int32_t remote_same_node = config_.intranode_rdma ? 2 : 1;
    for (int t = 0; t < T; ++t) {
      const int32_t h = home_[t];
      const int32_t hn = node[h];
      ++tokens_[h];
      for (int j = 0; j < k; ++j) {
        const int32_t c = pair_cell_[static_cast<int64_t>(t) * k + j];
        if (c < 0) continue;
        const int32_t r = cell_rank[c];
        ++cell_rows_[c];
        const int32_t cls = r == h ? 0 : (node[r] == hn ? remote_same_node : 2);
        ++send[cls * P + h];
        ++recv[cls * P + r];
      }
    }
  } else {
    // Normal kernels: once to each destination rank of the home's node, once over RDMA to each other
    // destination node (to its rank with the home's local index), forwarded there over NVLink.
    for (int t = 0; t < T; ++t) {
      const int32_t h = home_[t];
      const int32_t hn = node[h];
      ++tokens_[h];
      dest_.clear();
      for (int j = 0; j < k; ++j) {
        const int32_t c = pair_cell_[static_cast<int64_t>(t) * k + j];
        if (c < 0) continue;
        ++cell_rows_[c];
        const int32_t r = cell_rank[c];
        if (std::find(dest_.begin(), dest_.end(), r) == dest_.end()) dest_.push_back(r);
      }
      for (size_t i = 0; i < dest_.size(); ++i) {
        const int32_t r = dest_[i];
        const int32_t n = node[r];
        if (r == h || n == hn) {
          const int cls = r == h ? 0 : 1;
          ++send[cls * P + h];
          ++recv[cls * P + r];
          continue;
        }
        const int32_t proxy = n * G + h % G;
        bool node_seen = false;
        for (size_t q = 0; q < i; ++q) node_seen |= node[dest_[q]] == n;
        if (!node_seen) {
          ++send[2 * P + h];
          ++recv[2 * P + proxy];
        }
        if (r != proxy) {
          ++send[P + proxy];
          ++recv[P + r];
        }
      }
    }
  }
  // Rows and distinct experts per rank from the (expert, rank) cells.
  zero(rows_);
  for (size_t c = 0; c < cell_rows_.size(); ++c) {
    rows_[cell_rank[c]] += cell_rows_[c];
    active_[cell_rank[c]] += cell_rows_[c] > 0 ? 1 : 0;
  }
}

void DeployAccounter::fold_step(int T) {
  const int P = config_.ep_size;
  const HardwareProfile& hw = config_.hardware;
  DeployStats& s = s_;
  ++s.steps;
  s.tokens += T;
  const int64_t pairs = static_cast<int64_t>(T) * top_k_;
  s.pairs += pairs;
  double dispatch = 0, gemm = 0, combine = 0, gemm_sum = 0;
  int64_t computed = 0, max_tokens = 0, max_rows = 0, max_nv = 0, max_rd = 0;
  zero(node_rows_);
  for (int r = 0; r < P; ++r) {
    const int64_t nv_send = send_[P + r], nv_recv = recv_[P + r], rd_send = send_[2 * P + r],
                  rd_recv = recv_[2 * P + r];
    const LinkRows link{nv_send, nv_recv, rd_send, rd_recv};
    const double d = a2a_seconds(link, s.dispatch_row_bytes, hw);
    const double c = a2a_seconds(link, s.combine_row_bytes, hw);
    const double g = gemm_seconds(RankWork{rows_[r], active_[r], tokens_[r]}, config_.model,
                                  s.dispatch_row_bytes, s.combine_row_bytes, hw);
    dispatch = std::max(dispatch, d);
    combine = std::max(combine, c);
    gemm = std::max(gemm, g);
    gemm_sum += g;
    computed += rows_[r];
    max_tokens = std::max(max_tokens, tokens_[r]);
    max_rows = std::max(max_rows, rows_[r]);
    max_nv = std::max(max_nv, nv_send);
    max_rd = std::max(max_rd, rd_send);
    node_rows_[node_of_[r]] += rows_[r];
    s.rank_tokens[r] += tokens_[r];
    s.rank_rows[r] += rows_[r];
    s.rank_local[r] += send_[r];
    s.rank_nvlink_send[r] += nv_send;
    s.rank_nvlink_recv[r] += nv_recv;
    s.rank_rdma_send[r] += rd_send;
    s.rank_rdma_recv[r] += rd_recv;
    s.rank_gemm_s[r] += g;
  }
  s.computed += computed;
  fold(s.token_balance, balance(max_tokens, T, P));
  fold(s.rank_balance, balance(max_rows, computed, P));
  const int64_t max_node = *std::max_element(node_rows_.begin(), node_rows_.end());
  fold(s.node_balance, balance(max_node, computed, static_cast<int64_t>(node_rows_.size())));
  s.max_nvlink_send += max_nv;
  s.max_rdma_send += max_rd;
  s.dispatch_s += dispatch;
  s.gemm_s += gemm;
  s.combine_s += combine;
  s.gemm_mean_s += gemm_sum / P;
  const double step = dispatch + gemm + combine;
  s.step_s += step;
  s.step_max_s = std::max(s.step_max_s, step);
}

DeployStats DeployAccounter::result() const {
  DeployStats s = s_;
  s.warmup_steps = warm_steps_;
  if (s.steps > 0) {
    const double n = static_cast<double>(s.steps);
    for (StepRatio* r : {&s.token_balance, &s.rank_balance, &s.node_balance}) r->mean /= n;
  }
  return s;
}

}  // namespace moe::sim::deploy
