// moe.plan(): the router and the dispatch planner on numpy arrays, without a layer.
#include <pybind11/stl.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "moe/api/python_bindings.h"
#include "moe/io/layer_weights.h"
#include "moe/layer/moe_layer_config.h"
#include "router/dispatch_planner.h"
#include "router/plan_checks.h"
#include "router/topk_router.h"

namespace moe::api {
namespace {

py::dict plan_logits(const py::handle& logits_obj, const py::handle& request_ids, const py::handle& positions,
                     int top_k, const std::string& router, const std::string& mode, double capacity_factor,
                     const std::optional<std::string>& scope, const std::optional<std::string>& priority,
                     const std::optional<std::string>& overflow, std::optional<bool> renormalize,
                     int reroute_depth, uint64_t seed, int min_capacity, PyRoutingState* state) {
  py::array logits = require_f32_matrix(logits_obj, "logits", -1);
  const int64_t T = logits.shape(0), E = logits.shape(1);
  if (T > INT32_MAX || E > INT32_MAX) throw py::value_error("logits is too large");
  std::vector<TokenMeta> meta = make_meta(request_ids, positions, T);
  RouterConfig rc = MoELayerConfig::router_named(router);
  rc.num_experts = static_cast<int>(E);
  if (top_k > 0) rc.top_k = top_k;
  if (top_k < 0) throw py::value_error("top_k must be >= 0 (0 keeps the router's)");
  if (top_k == 0 && rc.top_k > rc.num_experts) rc.top_k = rc.num_experts;
  if (renormalize) rc.renormalize = *renormalize;
  DispatchPolicy policy = DispatchPolicy::mode(mode);
  if (capacity_factor > 0) policy.capacity_factor = capacity_factor;
  if (scope) policy.scope = parse_capacity_scope(*scope);
  if (priority) policy.priority = parse_priority(*priority);
  if (overflow) policy.overflow = parse_overflow(*overflow);
  if (reroute_depth > 0) policy.reroute_depth = reroute_depth;
  policy.seed = seed;
  policy.min_capacity = min_capacity;
  if (state != nullptr) check_routing_state(&state->state, rc.num_experts, rc.top_k);
  DispatchPlanner planner(rc.num_experts, rc.top_k, policy);
  TopKRouter topk(rc, planner.num_ranked_needed());
  TokenRoutes routes;
  DispatchPlan plan;
  const float* lp = static_cast<const float*>(logits.data());
  {
    py::gil_scoped_release release;
    std::unique_lock<std::mutex> state_lock;
    if (state != nullptr) state_lock = std::unique_lock<std::mutex>(state->mutex);
    topk.route(lp, static_cast<int>(T), routes);
    planner.plan(routes, meta, state ? &state->state : nullptr, plan);
  }
  return plan_dict(plan);
}

}  // namespace

void bind_planner(py::module_& m) {
  m.def("plan", &plan_logits, py::arg("logits"), py::arg("request_ids"), py::arg("positions"),
        py::arg("top_k") = 0, py::arg("router") = "mixtral", py::arg("mode") = "stable",
        py::arg("capacity_factor") = 0.0, py::arg("scope") = py::none(), py::arg("priority") = py::none(),
        py::arg("overflow") = py::none(), py::arg("renormalize") = py::none(), py::arg("reroute_depth") = 0,
        py::arg("seed") = 0, py::arg("min_capacity") = 0, py::arg("state") = nullptr,
        "Routes float32 logits [T, E] and plans dispatch (docs/routing.md). Returns a dict of numpy arrays: "
        "expert/slot/weight/status [T, top_k], expert_load/expert_capacity [E], and counts.");
}

}  // namespace moe::api
