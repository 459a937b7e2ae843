// The names and rules of the dispatch policies, as the code has them, for the docs test (tests/
// docs_prose_test.py): every capacity scope, the sets of scopes the documents speak of (those that carry a
// routing state, those that need each request admitted, those with per-request pools, those that salt a
// prefix cache's keys), every dispatch mode (moe-sim's and the divergence lab's) and layer preset with its
// rules. One JSON object on stdout.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "moe/layer/moe_layer_config.h"
#include "moe/model/model_config.h"
#include "router/dispatch_policy.h"
#include "router/router_config.h"
#include "router/routing_rule.h"
#include "router/rules/capacity.h"
#include "router/rules/plan_rules.h"

int main() {
  using moe::CapacityScope;
  using moe::DispatchPolicy;
  nlohmann::ordered_json j;
  j["scopes"] = moe::capacity_scope_names();
  // stateful: carry a RoutingState across forward passes; admitted: need each request admitted (a pool for
  // its prompt); per_request: pools per request; strangers_proof: a request's plan ignores strangers under
  // request priority (pools per request, or no capacity); any_priority: ... under every priority (decided in
  // position order, or no capacity); salted: their decisions read the prompt length (prefix_cache_salt).
  nlohmann::ordered_json sets = {
      {"stateful", nlohmann::json::array()},     {"admitted", nlohmann::json::array()},
      {"per_request", nlohmann::json::array()},  {"strangers_proof", nlohmann::json::array()},
      {"any_priority", nlohmann::json::array()}, {"salted", nlohmann::json::array()}};
  for (const std::string& name : moe::capacity_scope_names()) {
    DispatchPolicy p;
    p.scope = moe::parse_capacity_scope(name);
    if (moe::rules::carries_routing_state(p)) sets["stateful"].push_back(name);
    if (moe::rules::pools_prompt(p)) sets["admitted"].push_back(name);
    const bool dropless = p.scope == CapacityScope::kNone;
    if (moe::rules::pools_per_request(p)) sets["per_request"].push_back(name);
    if (moe::rules::pools_per_request(p) || dropless) sets["strangers_proof"].push_back(name);
    p.priority = moe::Priority::kArrival;
    if (moe::rules::orders_by_request(p) || dropless) sets["any_priority"].push_back(name);
    // A decode block (ending past a 1-token prompt) keyed by the prompt length: the scope salts its keys.
    if (moe::prefix_cache_salt(moe::RoutingRule::of(p), 2, 1) != 0) sets["salted"].push_back(name);
  }
  j["scope_sets"] = sets;
  j["modes"] = nlohmann::json::array();
  for (const std::string& name : DispatchPolicy::mode_names()) {
    const DispatchPolicy p = DispatchPolicy::mode(name);
    j["modes"].push_back({{"name", name},
                          {"scope", std::string(moe::to_string(p.scope))},
                          {"priority", std::string(moe::to_string(p.priority))},
                          {"overflow", std::string(moe::to_string(p.overflow))},
                          {"lookahead", p.lookahead},
                          {"rules", moe::describe_rules(p)}});
  }
  // The divergence lab's modes (moe::model::ModelOptions::dispatch_mode: the modes above and one per scope).
  j["lab_modes"] = nlohmann::json::array();
  for (const std::string& name : moe::model::ModelOptions::dispatch_mode_names()) {
    const DispatchPolicy p = moe::model::ModelOptions::dispatch_mode(name, 1.0);
    j["lab_modes"].push_back({{"name", name},
                              {"scope", std::string(moe::to_string(p.scope))},
                              {"priority", std::string(moe::to_string(p.priority))}});
  }
  j["presets"] = nlohmann::json::array();
  for (const std::string& name : moe::MoELayerConfig::preset_names()) {
    const moe::MoELayerConfig c = moe::MoELayerConfig::preset(name, moe::io::Architecture::kMixtral);
    j["presets"].push_back({{"name", name},
                            {"scope", std::string(moe::to_string(c.policy.scope))},
                            {"priority", std::string(moe::to_string(c.policy.priority))},
                            {"lookahead", c.policy.lookahead},
                            {"kernel", std::string(moe::kernels::to_string(c.expert_kernel))},
                            {"description", moe::MoELayerConfig::preset_description(name)}});
  }
  j["router_presets"] = moe::RouterConfig::preset_names();
  std::cout << j.dump(2) << "\n";
  return 0;
}
