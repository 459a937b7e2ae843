#include "router/dispatch_planner.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "router/plan_checks.h"
#include "router/rules/capacity.h"
#include "router/rules/plan_rules.h"
#include "router/rules/slice_rules.h"
#include "router/rules/sort_keys.h"
#include "router/rules/turn_rules.h"

namespace moe {
namespace {

// Records placed pairs for the rules (router/rules/plan_rules.h): slot s of expert e is the s-th pair placed
// there in claiming order, counted across pools.
struct SlotPlacer {
  DispatchPlan& out;
  void operator()(int64_t pair, int32_t expert, float weight, PairStatus status, int32_t /*held_before*/) {
    out.pair_expert[pair] = expert;
    out.pair_slot[pair] = out.expert_load[expert]++;
    out.pair_weight[pair] = weight;
    out.pair_status[pair] = status;
  }
};

rules::RouteArrays route_arrays(const TokenRoutes& routes) {
  return rules::RouteArrays{routes.experts.data(), routes.weights.data(), routes.top_k, routes.num_ranked};
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
  check_planner_config(num_experts, top_k, policy_);
  rule_ = RoutingRule::of(policy_);
  if (policy_.scope == CapacityScope::kPrefix || policy_.scope == CapacityScope::kCausal) {
    capacity_table_.resize(kCapacityTableSize);
    for (int64_t n = 0; n < kCapacityTableSize; ++n) {
      capacity_table_[n] = rules::request_capacity(policy_, n, top_k_, num_experts_);
    }
  }
  pool_count_.assign(num_experts_, 0);
  scratch_held_.assign(num_experts_, 0);
}

rules::PromptCapacity DispatchPlanner::prompt_capacity(uint32_t prompt_length, int64_t whole) const {
  return rules::PromptCapacity{&policy_,
                               top_k_,
                               num_experts_,
                               prompt_length,
                               whole,
                               capacity_table_.data(),
                               static_cast<int64_t>(capacity_table_.size())};
}

int DispatchPlanner::num_ranked_needed() const {
  return rules::num_ranked_needed(policy_, num_experts_, top_k_);
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
  const bool by_request = rules::orders_by_request(policy_);
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
        key.major = rules::descending_key(routes.top1_score[t]);
        key.minor = 0;
      } else {
        key.major = rules::random_priority_key(policy_.seed, meta[t].request_id, meta[t].position);
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
  const bool per_request = rules::pools_per_request(policy_);
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

PlanError DispatchPlanner::find_duplicate(std::span<const TokenMeta> meta) const {
  PlanError error;
  for (size_t i = 1; i < order_.size(); ++i) {
    const TokenMeta& a = meta[order_[i - 1]];
    const TokenMeta& b = meta[order_[i]];
    if (a == b) {
      error.code = kPlanDuplicateToken;
      error.row_a = order_[i - 1];
      error.row_b = order_[i];
      error.request_id = a.request_id;
      error.position = a.position;
      break;
    }
  }
  return error;
}

PlanError DispatchPlanner::find_state_error(std::span<const TokenMeta> meta,
                                            const RoutingState* state) const {
  PlanError error;
  const bool sequence = rules::pools_prompt(policy_);
  if (sequence && state == nullptr) return error;  // every request's rows are its whole prompt
  const int num_groups = static_cast<int>(group_begin_.size()) - 1;
  for (int g = 0; g < num_groups; ++g) {
    const int32_t first = order_[group_begin_[g]];
    const uint64_t id = meta[first].request_id;
    const RoutingState::Request* known = state ? state->find(id) : nullptr;
    if (sequence && (known == nullptr || known->prompt_length == 0)) {
      error.code = kPlanNotAdmitted;
      error.row_a = error.row_b = first;
      error.request_id = id;
      error.position = meta[first].position;
      return error;
    }
    if (known != nullptr && !known->rule.empty() && !(known->rule == rule_)) {
      error.code = kPlanRuleMismatch;
      error.row_a = error.row_b = first;
      error.request_id = id;
      error.position = meta[first].position;
      return error;
    }
    uint32_t expected = known ? known->next_position : 0;
    for (int32_t i = group_begin_[g]; i < group_begin_[g + 1]; ++i, ++expected) {
      const uint32_t position = meta[order_[i]].position;
      if (position != expected) {
        error.code = kPlanNonContiguousPosition;
        error.row_a = first;
        error.row_b = order_[i];
        error.request_id = id;
        error.position = position;
        error.expected = expected;
        return error;
      }
    }
  }
  return error;
}

void DispatchPlanner::plan_pooled_group(const TokenRoutes& routes, int32_t begin, int32_t end,
                                        int64_t capacity, DispatchPlan& out) {
  const bool reroute = policy_.overflow == Overflow::kReroute;
  SlotPlacer place{out};
  overflow_.clear();
  for (int j = 0; j < top_k_; ++j) {
    for (int32_t i = begin; i < end; ++i) {
      const int32_t t = order_[i];
      const int32_t e = routes.expert(t, j);
      if (e < 0) continue;  // unavailable: stays dropped
      const int64_t pair = static_cast<int64_t>(t) * top_k_ + j;
      if (pool_count_[e] < capacity) {
        place(pair, e, routes.weight(t, j), PairStatus::kKept, pool_count_[e]++);
      } else if (reroute) {
        overflow_.push_back(pair);
      }
    }
  }
  const rules::RouteArrays arrays = route_arrays(routes);
  for (int64_t pair : overflow_) {
    rules::try_reroute(arrays, policy_.reroute_depth, pair, out.pair_expert.data(), capacity,
                       pool_count_.data(), place);
  }
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
                                        int32_t begin, int32_t end, RoutingState::Request& request,
                                        DispatchPlan& out) {
  const rules::PromptCapacity capacity_of = prompt_capacity(0, 0);
  auto budget = [&](uint32_t position) { return capacity_of(int64_t{position} + 1); };  // causal_budget
  const int64_t last_budget = budget(meta[order_[end - 1]].position);
  for (int e = 0; e < num_experts_; ++e) {
    pool_count_[e] = request.slots_held[e];
    out.expert_capacity[e] += std::max<int64_t>(0, last_budget - request.slots_held[e]);
  }
  SlotPlacer place{out};
  rules::decide_in_position_order(route_arrays(routes), policy_, order_.data(), begin, end, meta.data(),
                                  budget, pool_count_.data(), out.pair_expert.data(), out.pair_status.data(),
                                  place);
  for (int e = 0; e < num_experts_; ++e) {
    request.slots_held[e] = pool_count_[e];
    pool_count_[e] = 0;
  }
  request.next_position = meta[order_[end - 1]].position + 1;
  request.rule = rule_;
}

int32_t DispatchPlanner::plan_sequence_group(const TokenRoutes& routes, std::span<const TokenMeta> meta,
                                             int32_t begin, int32_t end, RoutingState::Request* request,
                                             int64_t decode_capacity, DispatchPlan& out) {
  // With a state: the admitted turns, the slots and choice counts its earlier chunks hold (advanced in
  // place). Without: these rows are the whole prompt (every row is a prompt row, L = T_r, nothing held).
  const uint32_t prompt_length = request ? request->prompt_length : static_cast<uint32_t>(end - begin);
  const rules::TurnEnds turns =
      request != nullptr && request->turn_ends.size() > 1
          ? rules::TurnEnds{request->turn_ends.data(), static_cast<int>(request->turn_ends.size())}
          : rules::TurnEnds{&prompt_length, 1};
  const size_t counts = static_cast<size_t>(rules::prompt_choice_counts_size(top_k_, num_experts_));
  if (request != nullptr && request->higher_choices.size() != counts) {
    request->higher_choices.assign(counts, 0);  // top_k 0
  }
  SlotPlacer place{out};
  const rules::RouteArrays arrays = route_arrays(routes);
  // The rows in runs of one segment each: first every run of a turn's prompt rows into the prompt pool, under
  // that turn's length; then the answer and decode rows, each a pool of its own.
  const uint32_t first_row = request ? request->next_position : 0;
  int32_t* higher = nullptr;
  int64_t offered =
      0;  // the prompt pool's budget at the batch's last prompt row (prefix scope: its horizon's)
  int32_t decode_rows = 0;
  auto prompt_run = [&](int32_t i0, int32_t i1, uint32_t position, uint32_t turn_length) {
    if (higher == nullptr) {  // the prompt pool, read once per batch
      if (request != nullptr) {
        std::copy(request->slots_held.begin(), request->slots_held.end(), pool_count_.begin());
        higher = request->higher_choices.data();
      } else {
        scratch_counts_.assign(counts, 0);
        higher = scratch_counts_.data();
      }
    }
    const int64_t capacity = rules::request_capacity(policy_, turn_length, top_k_, num_experts_);
    rules::decide_prompt_pool(arrays, policy_, num_experts_, order_.data(), i0, i1, position, turn_length,
                              prompt_capacity(turn_length, capacity), pool_count_.data(), higher,
                              out.pair_expert.data(), out.pair_status.data(), place);
    const uint32_t last_row = position + static_cast<uint32_t>(i1 - 1 - i0);
    offered = rules::prompt_budget(policy_, last_row, turn_length, top_k_, num_experts_);
  };
  auto decode_run = [&](int32_t i0, int32_t i1) {
    rules::keep_decode_rows(arrays, order_.data(), i0, i1, decode_capacity, place);
    decode_rows += i1 - i0;
  };
  rules::for_each_turn_run(turns, first_row, begin, end, prompt_run, [](int32_t, int32_t) {});
  rules::for_each_turn_run(
      turns, first_row, begin, end, [](int32_t, int32_t, uint32_t, uint32_t) {}, decode_run);
  if (higher != nullptr) {  // a group of decode rows only neither reads nor changes the prompt pool
    // Slots offered: what the prompt pool had left for this batch's prompt rows.
    for (int e = 0; e < num_experts_; ++e) {
      const int64_t held = request ? request->slots_held[e] : 0;
      out.expert_capacity[e] += std::max<int64_t>(0, offered - held);
    }
    if (request != nullptr) std::copy(pool_count_.begin(), pool_count_.end(), request->slots_held.begin());
    std::fill(pool_count_.begin(), pool_count_.end(), 0);
  }
  if (request != nullptr) {
    request->next_position = meta[order_[end - 1]].position + 1;
    request->rule = rule_;
  }
  return decode_rows;
}

void DispatchPlanner::check(const TokenRoutes& routes, std::span<const TokenMeta> meta,
                            const RoutingState* state) {
  check_plan_inputs(num_experts_, top_k_, policy_, routes, meta.size(), state);
  order_tokens(routes, meta);
  if (rules::orders_by_request(policy_) && !rows_distinct_) throw_if_plan_error(find_duplicate(meta));
  split_groups(meta);
  if (rules::carries_routing_state(policy_)) throw_if_plan_error(find_state_error(meta, state));
}

namespace {

// An empty plan of T tokens (every pair dropped), before the rules place pairs.
void reset_plan(DispatchPlan& out, int T, int top_k, int num_experts) {
  out.num_tokens = T;
  out.top_k = top_k;
  out.num_experts = num_experts;
  const size_t pairs = static_cast<size_t>(T) * top_k;
  out.pair_expert.assign(pairs, -1);
  out.pair_slot.assign(pairs, -1);
  out.pair_weight.assign(pairs, 0.0f);
  out.pair_status.assign(pairs, PairStatus::kDropped);
  out.expert_load.assign(num_experts, 0);
  out.expert_capacity.assign(num_experts, 0);
  out.batch_capacity = -1;
}

}  // namespace

void DispatchPlanner::plan_slice(const TokenRoutes& routes, std::span<const TokenMeta> meta,
                                 const int64_t* claims_before, int64_t capacity, DispatchPlan& out) {
  if (!rules::plans_in_slices(policy_)) {
    throw std::invalid_argument(
        "dispatch planner: plan_slice needs batch scope, arrival priority and drop (this planner's policy "
        "is " +
        std::string(to_string(policy_.scope)) + "/" + std::string(to_string(policy_.priority)) + "/" +
        std::string(to_string(policy_.overflow)) + ")");
  }
  if (claims_before == nullptr)
    throw std::invalid_argument("dispatch planner: plan_slice needs claims_before");
  check_plan_inputs(num_experts_, top_k_, policy_, routes, meta.size(), nullptr);
  const int T = routes.num_tokens;
  reset_plan(out, T, top_k_, num_experts_);
  out.batch_capacity = capacity;
  out.expert_capacity.assign(num_experts_, capacity);
  slice_seen_.assign(static_cast<size_t>(top_k_) * num_experts_, 0);
  SlotPlacer place{out};  // slots in this slice's claiming order: the whole batch's order of these pairs
  rules::decide_slice(route_arrays(routes), T, num_experts_, claims_before, capacity, slice_seen_.data(),
                      place);
  finish(routes, out);
}

void DispatchPlanner::plan(const TokenRoutes& routes, std::span<const TokenMeta> meta, RoutingState* state,
                           DispatchPlan& out) {
  // Claiming order and pools; every check before anything is written.
  check(routes, meta, state);
  const int T = routes.num_tokens;
  const int num_groups = static_cast<int>(group_begin_.size()) - 1;

  // Output shape.
  reset_plan(out, T, top_k_, num_experts_);

  switch (policy_.scope) {
    case CapacityScope::kBatch: {
      const int64_t capacity = rules::batch_capacity(policy_, T, top_k_, num_experts_);
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
        const int64_t capacity = rules::request_capacity(policy_, end - begin, top_k_, num_experts_);
        total_capacity += capacity;
        plan_pooled_group(routes, begin, end, capacity, out);
        reset_pool(begin, end, out);
      }
      out.expert_capacity.assign(num_experts_, total_capacity);
      break;
    }
    case CapacityScope::kCausal: {
      RoutingState::Request fresh;
      for (int g = 0; g < num_groups; ++g) {
        const int32_t begin = group_begin_[g], end = group_begin_[g + 1];
        RoutingState::Request* request;
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
    case CapacityScope::kSequence:
    case CapacityScope::kPrefix: {
      // Each decode row is a pool of its own with decode_capacity slots per expert: their offers are added
      // once, after the groups (integer sums: the same totals).
      const int64_t decode_capacity = rules::request_capacity(policy_, 1, top_k_, num_experts_);
      int64_t decode_rows = 0;
      for (int g = 0; g < num_groups; ++g) {
        const int32_t begin = group_begin_[g], end = group_begin_[g + 1];
        RoutingState::Request* request =
            state != nullptr ? &state->get_or_create(meta[order_[begin]].request_id) : nullptr;
        decode_rows += plan_sequence_group(routes, meta, begin, end, request, decode_capacity, out);
      }
      for (int e = 0; e < num_experts_; ++e) out.expert_capacity[e] += decode_rows * decode_capacity;
      break;
    }
  }
  finish(routes, out);
  if (state != nullptr && state->records() && rules::carries_routing_state(policy_)) {
    state->record_rows(meta, routes.experts.data(), routes.num_ranked, out.pair_expert.data());
  }
}

void DispatchPlanner::finish(const TokenRoutes& routes, DispatchPlan& out) {
  const int T = out.num_tokens;
  // Slots in order, per expert.
  out.expert_offsets.resize(num_experts_ + 1);
  out.expert_offsets[0] = 0;
  for (int e = 0; e < num_experts_; ++e)
    out.expert_offsets[e + 1] = out.expert_offsets[e] + out.expert_load[e];
  out.slot_pairs.resize(out.expert_offsets[num_experts_]);
  // Without branches on a pair's status (a dropped pair writes its slot entry to a sink instead), since
  // drops follow no pattern the branch predictor could learn.
  int64_t kept = 0, rerouted = 0, dropped_pairs = 0, fully_dropped = 0;
  int32_t sink = 0;
  for (int t = 0; t < T; ++t) {
    int lost = 0;
    float survivors = 0.0f;
    for (int j = 0; j < top_k_; ++j) {
      const int64_t pair = static_cast<int64_t>(t) * top_k_ + j;
      const PairStatus status = out.pair_status[pair];
      const bool dropped = status == PairStatus::kDropped;
      kept += status == PairStatus::kKept ? 1 : 0;
      rerouted += status == PairStatus::kRerouted ? 1 : 0;
      lost += dropped ? 1 : 0;
      const int32_t e = dropped ? 0 : out.pair_expert[pair];
      const int64_t index = dropped ? 0 : out.expert_offsets[e] + out.pair_slot[pair];
      int32_t* entry = dropped ? &sink : out.slot_pairs.data() + index;
      *entry = static_cast<int32_t>(pair);
      const float with = survivors + out.pair_weight[pair];
      survivors = dropped ? survivors : with;
    }
    dropped_pairs += lost;
    fully_dropped += lost == top_k_ ? 1 : 0;
    if (policy_.renormalize_survivors && lost > 0) [[unlikely]] {
      rules::renormalize_survivors(top_k_, lost, survivors,
                                   &routes.weights[static_cast<int64_t>(t) * routes.num_ranked],
                                   &out.pair_weight[static_cast<int64_t>(t) * top_k_]);
    }
  }
  out.num_kept = kept;
  out.num_rerouted = rerouted;
  out.num_dropped = dropped_pairs;
  out.num_tokens_fully_dropped = fully_dropped;
}

}  // namespace moe
