// moe._moe: the pybind11 module under the pure-Python package python/moe (see python/moe/__init__.py). Its
// parts: python_layer.cc (Weights, RoutingState, Layer), python_planner.cc (plan), python_arrays.cc (numpy
// marshalling).
#include <pybind11/pybind11.h>

#include "moe/api/python_bindings.h"

PYBIND11_MODULE(_moe, m) {
  m.doc() = "MoE router simulator and deterministic MoE runtime (C++ core of the moe package)";
  m.attr("__version__") = MOE_VERSION;
  moe::api::bind_layer(m);
  moe::api::bind_planner(m);
}
