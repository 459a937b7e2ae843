#include "router/cuda/plan_host.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "router/rules/plan_rules.h"

namespace moe::cuda {

void RoutingStateTable::build(std::span<const TokenMeta> meta, const RoutingState& state, int num_experts,
                              int top_k, const RoutingRule& rule) {
  row_of_.clear();
  request_ids.clear();
  token_row.resize(meta.size());
  for (size_t t = 0; t < meta.size(); ++t) {
    auto [it, inserted] = row_of_.try_emplace(meta[t].request_id, static_cast<int32_t>(request_ids.size()));
    if (inserted) request_ids.push_back(meta[t].request_id);
    token_row[t] = it->second;
  }
  const size_t E = static_cast<size_t>(num_experts);
  slots_held.assign(request_ids.size() * E, 0);
  next_position.assign(request_ids.size(), 0);
  prompt_length.assign(request_ids.size(), 0);
  counts_size = static_cast<size_t>(rules::prompt_choice_counts_size(top_k, num_experts));
  higher_choices.assign(request_ids.size() * counts_size, 0);
  for (size_t r = 0; r < request_ids.size(); ++r) {
    if (const RoutingState::Request* known = state.find(request_ids[r])) {
      if (!known->rule.empty() && !(known->rule == rule)) {
        PlanError error;
        error.code = kPlanRuleMismatch;
        error.request_id = request_ids[r];
        const auto first = std::find(token_row.begin(), token_row.end(), static_cast<int32_t>(r));
        error.row_a = error.row_b = static_cast<int32_t>(first - token_row.begin());
        error.position = meta[error.row_b].position;
        throw_if_plan_error(error);
      }
      std::copy(known->slots_held.begin(), known->slots_held.end(), slots_held.begin() + r * E);
      if (known->higher_choices.size() == counts_size) {  // else never decided (sized on first use)
        std::copy(known->higher_choices.begin(), known->higher_choices.end(),
                  higher_choices.begin() + r * counts_size);
      }
      next_position[r] = known->next_position;
      prompt_length[r] = known->prompt_length;
    }
  }
  // Conversations' turn ends, only when a row has several.
  turn_ends.clear();
  turn_offsets.clear();
  bool conversations = false;
  for (size_t r = 0; r < request_ids.size() && !conversations; ++r) {
    const RoutingState::Request* known = state.find(request_ids[r]);
    conversations = known != nullptr && known->turn_ends.size() > 1;
  }
  if (conversations) {
    turn_offsets.push_back(0);
    for (size_t r = 0; r < request_ids.size(); ++r) {
      if (const RoutingState::Request* known = state.find(request_ids[r])) {
        turn_ends.insert(turn_ends.end(), known->turn_ends.begin(), known->turn_ends.end());
      }
      turn_offsets.push_back(static_cast<int32_t>(turn_ends.size()));
    }
  }
}

void RoutingStateTable::write_back(RoutingState& state, const RoutingRule& rule) const {
  const size_t E = static_cast<size_t>(state.num_experts());
  for (size_t r = 0; r < request_ids.size(); ++r) {
    RoutingState::Request& request = state.get_or_create(request_ids[r]);
    std::copy(slots_held.begin() + r * E, slots_held.begin() + (r + 1) * E, request.slots_held.begin());
    if (prompt_length[r] > 0) {  // sequence scope's counts (admitted requests only)
      request.higher_choices.assign(higher_choices.begin() + r * counts_size,
                                    higher_choices.begin() + (r + 1) * counts_size);
    }
    request.next_position = next_position[r];
    request.rule = rule;
  }
}

ArrayPlanner::ArrayPlanner(int num_experts, int top_k, DispatchPolicy policy, ArrayPlanRunner runner)
    : num_experts_(num_experts), top_k_(top_k), policy_(policy), runner_(std::move(runner)) {
  check_planner_config(num_experts, top_k, policy_);
}

void ArrayPlanner::plan(const TokenRoutes& routes, std::span<const TokenMeta> meta, RoutingState* state,
                        DispatchPlan& out) const {
  check_plan_inputs(num_experts_, top_k_, policy_, routes, meta.size(), state);
  const int T = routes.num_tokens;
  PlanShape shape{T, num_experts_, top_k_, routes.num_ranked, policy_};
  shape.validate();  // the sort keys' limits
  const int E = num_experts_;
  const size_t P = static_cast<size_t>(T) * top_k_;

  const bool use_state = rules::carries_routing_state(policy_) && state != nullptr;
  RoutingStateTable table;
  const RoutingRule rule = RoutingRule::of(policy_);
  if (use_state) table.build(meta, *state, E, top_k_, rule);

  PlanInputs in;
  in.num_tokens = T;
  in.route_experts = routes.experts.data();
  in.route_weights = routes.weights.data();
  in.top1_score = routes.top1_score.data();
  in.meta = meta.data();
  if (use_state) {
    in.token_state_row = table.token_row.data();
    in.num_state_rows = table.num_rows();
    in.state_slots_held = table.slots_held.data();
    in.state_next_position = table.next_position.data();
    in.state_prompt_length = table.prompt_length.data();
    in.state_higher_choices = table.higher_choices.data();
    if (!table.turn_offsets.empty()) {
      in.state_turn_ends = table.turn_ends.data();
      in.state_turn_offsets = table.turn_offsets.data();
    }
  }

  out.num_tokens = T;
  out.top_k = top_k_;
  out.num_experts = E;
  out.batch_capacity = plan_batch_capacity(shape, T);
  out.pair_expert.resize(P);
  out.pair_slot.resize(P);
  out.pair_weight.resize(P);
  out.pair_status.resize(P);
  out.expert_load.resize(E);
  out.expert_capacity.resize(E);
  out.expert_offsets.resize(E + 1);
  out.slot_pairs.resize(P);
  int64_t counts[4] = {0, 0, 0, 0};
  PlanError error;
  PlanOutputs o;
  o.pair_expert = out.pair_expert.data();
  o.pair_slot = out.pair_slot.data();
  o.pair_weight = out.pair_weight.data();
  o.pair_status = out.pair_status.data();
  o.expert_load = out.expert_load.data();
  o.expert_capacity = out.expert_capacity.data();
  o.expert_offsets = out.expert_offsets.data();
  o.slot_pairs = out.slot_pairs.data();
  o.counts = counts;
  o.error = &error;
  runner_(shape, in, o);

  throw_if_plan_error(error);

  out.slot_pairs.resize(out.expert_offsets[E]);
  out.num_kept = counts[0];
  out.num_rerouted = counts[1];
  out.num_dropped = counts[2];
  out.num_tokens_fully_dropped = counts[3];
  if (use_state) {
    table.write_back(*state, rule);
    state->record_rows(meta, routes.experts.data(), routes.num_ranked, out.pair_expert.data());
  }
}

}  // namespace moe::cuda
