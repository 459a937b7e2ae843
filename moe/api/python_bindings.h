// Internal to moe/api's Python module (moe._moe): what its translation units share - numpy marshalling with
// the module's error messages, the causal-state handle, and each part's binding function.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "router/dispatch_plan.h"
#include "router/routing_state.h"
#include "router/token_meta.h"

namespace moe::api {

namespace py = pybind11;

// A read-only check that `obj` is a C-contiguous float32 ndarray of shape [rows, cols] (cols < 0: any), with
// no copy or conversion; TypeError / ValueError naming `what` and the fix otherwise.
py::array require_f32_matrix(const py::handle& obj, const char* what, int64_t cols);

// (request_ids, positions) of n rows: any integer arrays (copied), range-checked.
std::vector<TokenMeta> make_meta(const py::handle& request_ids, const py::handle& positions, int64_t n);

// A plan as numpy arrays: expert, slot, weight, status [T, k]; expert_load, expert_capacity [E]; counts.
py::dict plan_dict(const DispatchPlan& plan);

std::string type_name(const py::handle& h);
std::string dtype_name(const py::array& a);

// moe.RoutingState: a routing state with the lock that serialises the calls that use it.
struct PyRoutingState {
  PyRoutingState(int num_experts, int top_k, bool record = false) : state(num_experts, top_k, record) {}
  RoutingState state;
  std::mutex mutex;
};

// The module's parts: Weights, RoutingState and Layer (python_layer.cc); plan() (python_planner.cc).
void bind_layer(py::module_& m);
void bind_planner(py::module_& m);

}  // namespace moe::api
