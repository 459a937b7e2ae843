// moe._moe: the pybind11 module under the pure-Python package python/moe (see python/moe/__init__.py). Its
// parts: python_layer.cc (Weights, RoutingState, Layer), python_planner.cc (plan), python_arrays.cc (numpy
// marshalling).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "moe/api/python_bindings.h"
#include "moe/io/io_error.h"
#include "moe/layer/moe_layer_config.h"

PYBIND11_MODULE(_moe, m) {
  m.doc() = "MoE router simulator and deterministic MoE runtime (C++ core of the moe package)";
  m.attr("__version__") = MOE_VERSION;
  // Weights that would not fit the memory available (moe/io/memory.h): MemoryError with the sizes.
  pybind11::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const moe::io::OutOfMemory& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    }
  });
  // The one source of the presets' descriptions (MoELayerConfig::preset_description): moe.Layer's docstring
  // is written from these at import, so it cannot drift from what the presets do.
  m.def("preset_names", &moe::MoELayerConfig::preset_names, "the layer presets' names");
  m.def("preset_description", &moe::MoELayerConfig::preset_description, pybind11::arg("preset"),
        "one sentence on a layer preset: its dispatch and kernels, read from the preset, then what it "
        "guarantees");
  moe::api::bind_layer(m);
  moe::api::bind_planner(m);
}
