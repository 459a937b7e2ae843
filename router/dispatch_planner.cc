#include "router/dispatch_planner.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <stdexcept>
#include <string>

namespace moe {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument("dispatch planner: " + msg);
}

// A 64-bit mix (splitmix64's finaliser), used for the random priority's keys.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Maps a finite float to an unsigned key with the same order; higher floats get lower keys, so sorting the
// keys ascending sorts the floats descending. +0 and -0 map to the same key.
uint64_t descending_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return ~ascending & 0xffffffffu;
}

template <typename Key>
void sort_if_needed(std::vector<Key>& keys) {
  auto less = [](const Key& a, const Key& b) {
    if (a.major != b.major) return a.major < b.major;
    if (a.minor != b.minor) return a.minor < b.minor;
    return a.token < b.token;
  };
  // Batches usually arrive in request order already; checking is linear, sorting is not.
  if (!std::is_sorted(keys.begin(), keys.end(), less)) std::sort(keys.begin(), keys.end(), less);
}

}  // namespace

DispatchPlanner::DispatchPlanner(int num_experts, int top_k, DispatchPolicy policy)
    : num_experts_(num_experts), top_k_(top_k), policy_(policy) {
  if (num_experts < 1) fail("num_experts must be >= 1 (got " + std::to_string(num_experts) + ")");
  if (top_k < 1 || top_k > num_experts) {
    fail("top_k (" + std::to_string(top_k) + ") must be in [1, num_experts=" + std::to_string(num_experts) +
         "]");
  }
  policy_.validate();
  pool_count_.assign(num_experts_, 0);
  scratch_held_.assign(num_experts_, 0);
}

int DispatchPlanner::num_ranked_needed() const {
  if (policy_.overflow != Overflow::kReroute) return top_k_;
  return std::min(num_experts_, top_k_ + policy_.reroute_depth);
}

void DispatchPlanner::reserve(int max_tokens) {
  keys_.reserve(max_tokens);
  order_.reserve(max_tokens);
  group_begin_.reserve(max_tokens + 1);
  overflow_.reserve(static_cast<size_t>(max_tokens) * top_k_);
}

void DispatchPlanner::order_tokens(const TokenRoutes& routes, std::span<const TokenMeta> meta) {
  const int T = routes.num_tokens;
  order_.resize(T);
  const bool by_request = policy_.priority == Priority::kRequest || policy_.scope == CapacityScope::kCausal;
  // Engines form batches request by request, so rows are usually in (request_id, position) order already:
  // one linear pass checks it and records where each request starts, replacing the sort and the grouping
  // pass.
  auto rows_in_request_order = [&] {
    group_begin_.clear();
    if (T > 0) group_begin_.push_back(0);
    // Row t against row t - 1; records t when it starts a request.
    auto follows = [&](int t) {
      const TokenMeta& a = meta[t - 1];
      const TokenMeta& b = meta[t];
      if (a.request_id != b.request_id) {
        if (a.request_id > b.request_id) return false;
        group_begin_.push_back(t);
        return true;
      }
      return a.position < b.position;
    };
    int t = 1;
    // Most rows continue the previous row's request: four such rows take one branch; four rows with a
    // request boundary (or out of order) take the row-by-row check.
    for (; t + 4 <= T; t += 4) {
      const TokenMeta* m = meta.data() + t - 1;
      const uint64_t id = m[0].request_id;
      const bool same = (m[1].request_id == id) & (m[2].request_id == id) & (m[3].request_id == id) &
                        (m[4].request_id == id);
      const bool rising = (m[0].position < m[1].position) & (m[1].position < m[2].position) &
                          (m[2].position < m[3].position) & (m[3].position < m[4].position);
      if (same & rising) continue;
      for (int u = t; u < t + 4; ++u) {
        if (!follows(u)) return false;
      }
    }
    for (; t < T; ++t) {
      if (!follows(t)) return false;
    }
    group_begin_.push_back(T);
    return true;
  };
  rows_distinct_ = false;
  if (by_request && rows_in_request_order()) {
    rows_distinct_ = true;  // strictly ascending (request_id, position); group_begin_ holds the requests
    for (int t = 0; t < T; ++t) order_[t] = t;
  } else if (policy_.priority == Priority::kArrival && !by_request) {
    for (int t = 0; t < T; ++t) order_[t] = t;
  } else {
    keys_.resize(T);
    for (int t = 0; t < T; ++t) {
      OrderKey& key = keys_[t];
      key.token = t;
      if (by_request) {
        key.major = meta[t].request_id;
        key.minor = meta[t].position;
      } else if (policy_.priority == Priority::kScore) {
        key.major = descending_key(routes.top1_score[t]);
        key.minor = 0;
      } else {
        // kRandom: a seeded shuffle keyed by the token's identity, not its row, so a request's own order does
        // not move when strangers join the batch (kernels/cuda/plan_core.h computes the same key).
        key.major = mix64(policy_.seed ^ mix64(meta[t].request_id ^ mix64(meta[t].position)));
        key.minor = 0;
      }
    }
    sort_if_needed(keys_);
    for (int t = 0; t < T; ++t) order_[t] = keys_[t].token;
  }
  // Request scope groups the claiming order by request, keeping the priority order inside each request.
  if (policy_.scope == CapacityScope::kRequest && !by_request) {
    keys_.resize(T);
    for (int i = 0; i < T; ++i)
      keys_[i] = OrderKey{meta[order_[i]].request_id, static_cast<uint64_t>(i), order_[i]};
    sort_if_needed(keys_);
    for (int i = 0; i < T; ++i) order_[i] = keys_[i].token;
  }
}

void DispatchPlanner::split_groups(std::span<const TokenMeta> meta) {
  const int T = static_cast<int>(order_.size());
  const bool per_request =
      policy_.scope == CapacityScope::kRequest || policy_.scope == CapacityScope::kCausal;
  if (per_request && rows_distinct_) return;  // order_tokens() recorded the requests while checking the order
  group_begin_.clear();
  if (!per_request) {  // one pool for the whole batch
    if (T > 0) group_begin_.push_back(0);
    group_begin_.push_back(T);
    return;
  }
  for (int i = 0; i < T; ++i) {
    if (i == 0 || meta[order_[i]].request_id != meta[order_[i - 1]].request_id) group_begin_.push_back(i);
  }
  group_begin_.push_back(T);
}

void DispatchPlanner::check_distinct(std::span<const TokenMeta> meta) const {
  for (size_t i = 1; i < order_.size(); ++i) {
    const TokenMeta& a = meta[order_[i - 1]];
    const TokenMeta& b = meta[order_[i]];
    if (a == b) {
      fail("rows " + std::to_string(order_[i - 1]) + " and " + std::to_string(order_[i]) +
           " both claim request " + std::to_string(a.request_id) + " position " + std::to_string(a.position));
    }
  }
}

void DispatchPlanner::place(int64_t pair, int32_t expert, float weight, PairStatus status,
                            DispatchPlan& out) {
  out.pair_expert[pair] = expert;
  out.pair_slot[pair] = out.expert_load[expert]++;
  out.pair_weight[pair] = weight;
  out.pair_status[pair] = status;
}

bool DispatchPlanner::try_reroute(const TokenRoutes& routes, int64_t pair, int64_t capacity,
                                  DispatchPlan& out) {
  const int64_t t = pair / top_k_;
  const int32_t* used = out.pair_expert.data() + t * top_k_;
  const int last_rank = std::min(routes.num_ranked, top_k_ + policy_.reroute_depth);
  for (int r = top_k_; r < last_rank; ++r) {
    const int32_t e = routes.expert(t, r);
    if (e < 0) return false;  // unavailable ranks come last
    if (std::find(used, used + top_k_, e) != used + top_k_) continue;
    if (pool_count_[e] < capacity) {
      ++pool_count_[e];
      place(pair, e, routes.weight(t, r), PairStatus::kRerouted, out);
      return true;
    }
  }
  return false;
}

void DispatchPlanner::plan_pooled_group(const TokenRoutes& routes, int32_t begin, int32_t end,
                                        int64_t capacity, DispatchPlan& out) {
  const bool reroute = policy_.overflow == Overflow::kReroute;
  overflow_.clear();
  for (int j = 0; j < top_k_; ++j) {
    for (int32_t i = begin; i < end; ++i) {
      const int32_t t = order_[i];
      const int32_t e = routes.expert(t, j);
      if (e < 0) continue;  // unavailable: stays dropped
      const int64_t pair = static_cast<int64_t>(t) * top_k_ + j;
      if (pool_count_[e] < capacity) {
        ++pool_count_[e];
        place(pair, e, routes.weight(t, j), PairStatus::kKept, out);
      } else if (reroute) {
        overflow_.push_back(pair);
      }
    }
  }
  for (int64_t pair : overflow_) try_reroute(routes, pair, capacity, out);
}

void DispatchPlanner::reset_pool(int32_t begin, int32_t end, const DispatchPlan& out) {
  // A request with few pairs (a decode step's single token) among many experts touches at most k * rows
  // counts: clearing those beats clearing all E once k * rows is well below E (a vectorised fill clears
  // 8 counts per store; visiting a pair takes several instructions). Every count the pool raised belongs
  // to a placed pair of its rows.
  if (static_cast<int64_t>(end - begin) * top_k_ * 32 > num_experts_) {
    std::fill(pool_count_.begin(), pool_count_.end(), 0);
    return;
  }
  for (int32_t i = begin; i < end; ++i) {
    const int32_t* experts = out.pair_expert.data() + static_cast<int64_t>(order_[i]) * top_k_;
    for (int j = 0; j < top_k_; ++j) {
      if (experts[j] >= 0) pool_count_[experts[j]] = 0;
    }
  }
}

void DispatchPlanner::plan_causal_group(const TokenRoutes& routes, std::span<const TokenMeta> meta,
                                        int32_t begin, int32_t end, CausalRoutingState::Request& request,
                                        DispatchPlan& out) {
  const bool reroute = policy_.overflow == Overflow::kReroute;
  auto budget = [&](uint32_t position) {
    return std::max<int64_t>({1, policy_.min_capacity,
                              rounded_capacity(policy_.capacity_factor, int64_t{position} + 1, top_k_,
                                               num_experts_, policy_.rounding)});
  };
  const int64_t last_budget = budget(meta[order_[end - 1]].position);
  for (int e = 0; e < num_experts_; ++e) {
    pool_count_[e] = request.slots_held[e];
    out.expert_capacity[e] += std::max<int64_t>(0, last_budget - request.slots_held[e]);
  }
  for (int32_t i = begin; i < end; ++i) {
    const int32_t t = order_[i];
    const int64_t capacity = budget(meta[t].position);
    overflow_.clear();
    for (int j = 0; j < top_k_; ++j) {
      const int32_t e = routes.expert(t, j);
      if (e < 0) continue;
      const int64_t pair = static_cast<int64_t>(t) * top_k_ + j;
      if (pool_count_[e] < capacity) {
        ++pool_count_[e];
        place(pair, e, routes.weight(t, j), PairStatus::kKept, out);
      } else if (reroute) {
        overflow_.push_back(pair);
      }
    }
    for (int64_t pair : overflow_) try_reroute(routes, pair, capacity, out);
  }
  for (int e = 0; e < num_experts_; ++e) {
    request.slots_held[e] = pool_count_[e];
    pool_count_[e] = 0;
  }
  request.next_position = meta[order_[end - 1]].position + 1;
}

void DispatchPlanner::plan(const TokenRoutes& routes, std::span<const TokenMeta> meta,
                           CausalRoutingState* state, DispatchPlan& out) {
  // Shapes.
  if (routes.num_experts != num_experts_ || routes.top_k != top_k_) {
    fail("routes are for " + std::to_string(routes.num_experts) + " experts, top_k " +
         std::to_string(routes.top_k) + " but the planner for " + std::to_string(num_experts_) +
         " experts, top_k " + std::to_string(top_k_));
  }
  if (routes.num_ranked < num_ranked_needed()) {
    fail("routes rank " + std::to_string(routes.num_ranked) + " experts per token but the policy needs " +
         std::to_string(num_ranked_needed()) + " (top_k + reroute_depth)");
  }
  const int T = routes.num_tokens;
  if (static_cast<int64_t>(meta.size()) != T) {
    fail("token metadata has " + std::to_string(meta.size()) + " rows but the routes have " +
         std::to_string(T));
  }
  if (state != nullptr && state->num_experts() != num_experts_) {
    fail("causal routing state is for " + std::to_string(state->num_experts()) + " experts, not " +
         std::to_string(num_experts_));
  }

  // Claiming order and pools; every check before anything is written.
  order_tokens(routes, meta);
  const bool by_request = policy_.priority == Priority::kRequest || policy_.scope == CapacityScope::kCausal;
  if (by_request && !rows_distinct_) check_distinct(meta);
  split_groups(meta);
  const int num_groups = static_cast<int>(group_begin_.size()) - 1;
  if (policy_.scope == CapacityScope::kCausal) {
    for (int g = 0; g < num_groups; ++g) {
      const uint64_t id = meta[order_[group_begin_[g]]].request_id;
      const CausalRoutingState::Request* known = state ? state->find(id) : nullptr;
      uint32_t expected = known ? known->next_position : 0;
      for (int32_t i = group_begin_[g]; i < group_begin_[g + 1]; ++i, ++expected) {
        const uint32_t position = meta[order_[i]].position;
        if (position != expected) {
          fail("request " + std::to_string(id) + ": causal scope needs contiguous positions from " +
               (known ? "its routing state's next position " : "position ") +
               std::to_string(known ? known->next_position : 0) + ", but position " +
               std::to_string(expected) + " is followed by " + std::to_string(position) + " in this batch");
        }
      }
    }
  }

  // Output shape.
  out.num_tokens = T;
  out.top_k = top_k_;
  out.num_experts = num_experts_;
  const size_t pairs = static_cast<size_t>(T) * top_k_;
  out.pair_expert.assign(pairs, -1);
  out.pair_slot.assign(pairs, -1);
  out.pair_weight.assign(pairs, 0.0f);
  out.pair_status.assign(pairs, PairStatus::kDropped);
  out.expert_load.assign(num_experts_, 0);
  out.expert_capacity.assign(num_experts_, 0);
  out.batch_capacity = -1;

  switch (policy_.scope) {
    case CapacityScope::kBatch: {
      const int64_t capacity = std::max<int64_t>(
          policy_.min_capacity,
          rounded_capacity(policy_.capacity_factor, T, top_k_, num_experts_, policy_.rounding));
      out.batch_capacity = capacity;
      out.expert_capacity.assign(num_experts_, capacity);
      if (T > 0) plan_pooled_group(routes, 0, T, capacity, out);
      std::fill(pool_count_.begin(), pool_count_.end(), 0);
      break;
    }
    case CapacityScope::kNone:
      out.expert_capacity.assign(num_experts_, -1);
      if (T > 0) plan_pooled_group(routes, 0, T, std::numeric_limits<int64_t>::max(), out);
      std::fill(pool_count_.begin(), pool_count_.end(), 0);
      break;
    case CapacityScope::kRequest: {
      // Every expert offers each request the same budget, so one sum serves all experts.
      int64_t total_capacity = 0;
      for (int g = 0; g < num_groups; ++g) {
        const int32_t begin = group_begin_[g], end = group_begin_[g + 1];
        const int64_t capacity = std::max<int64_t>(
            {1, policy_.min_capacity,
             rounded_capacity(policy_.capacity_factor, end - begin, top_k_, num_experts_, policy_.rounding)});
        total_capacity += capacity;
        plan_pooled_group(routes, begin, end, capacity, out);
        reset_pool(begin, end, out);
      }
      out.expert_capacity.assign(num_experts_, total_capacity);
      break;
    }
    case CapacityScope::kCausal: {
      CausalRoutingState::Request fresh;
      for (int g = 0; g < num_groups; ++g) {
        const int32_t begin = group_begin_[g], end = group_begin_[g + 1];
        CausalRoutingState::Request* request;
        if (state != nullptr) {
          request = &state->get_or_create(meta[order_[begin]].request_id);
        } else {
          scratch_held_.assign(num_experts_, 0);
          fresh.slots_held.swap(scratch_held_);
          request = &fresh;
        }
        plan_causal_group(routes, meta, begin, end, *request, out);
        if (state == nullptr) fresh.slots_held.swap(scratch_held_);
      }
      break;
    }
  }
  finish(routes, out);
}

void DispatchPlanner::finish(const TokenRoutes& routes, DispatchPlan& out) {
  const int T = out.num_tokens;
  // Slots in order, per expert.
  out.expert_offsets.resize(num_experts_ + 1);
  out.expert_offsets[0] = 0;
  for (int e = 0; e < num_experts_; ++e)
    out.expert_offsets[e + 1] = out.expert_offsets[e] + out.expert_load[e];
  out.slot_pairs.resize(out.expert_offsets[num_experts_]);
  out.num_kept = out.num_rerouted = out.num_dropped = out.num_tokens_fully_dropped = 0;
  for (int t = 0; t < T; ++t) {
    int lost = 0;
    float survivors = 0.0f;
    for (int j = 0; j < top_k_; ++j) {
      const int64_t pair = static_cast<int64_t>(t) * top_k_ + j;
      switch (out.pair_status[pair]) {
        case PairStatus::kKept:
          ++out.num_kept;
          break;
        case PairStatus::kRerouted:
          ++out.num_rerouted;
          break;
        case PairStatus::kDropped:
          ++out.num_dropped;
          ++lost;
          continue;
      }
      out.slot_pairs[out.expert_offsets[out.pair_expert[pair]] + out.pair_slot[pair]] =
          static_cast<int32_t>(pair);
      survivors += out.pair_weight[pair];
    }
    if (lost == top_k_) ++out.num_tokens_fully_dropped;
    if (policy_.renormalize_survivors && lost > 0 && lost < top_k_ && survivors > 0.0f) {
      float chosen = 0.0f;
      for (int j = 0; j < top_k_; ++j) chosen += routes.weight(t, j);
      const float scale = chosen / survivors;
      for (int j = 0; j < top_k_; ++j) out.pair_weight[static_cast<int64_t>(t) * top_k_ + j] *= scale;
    }
  }
}

}  // namespace moe
