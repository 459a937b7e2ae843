// numpy marshalling of the Python module (python_bindings.h).
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/api/python_bindings.h"

namespace moe::api {
namespace {

// Integer metadata [n] (any integer dtype, any layout: it is copied) checked against [0, max].
template <class Out>
std::vector<Out> int_vector(const py::handle& obj, const char* what, int64_t n, uint64_t max) {
  py::array a;
  if (py::isinstance<py::array>(obj)) {
    a = py::reinterpret_borrow<py::array>(obj);
  } else {
    try {
      a = py::array(py::module_::import("numpy").attr("asarray")(obj));
    } catch (const py::error_already_set&) {
      throw py::type_error(std::string(what) + " must be an array of integers (got " + type_name(obj) + ")");
    }
  }
  const char kind = a.dtype().kind();
  if (n == 0 && a.ndim() == 1 && a.shape(0) == 0) return {};  // an empty list has numpy's default float dtype
  if (kind != 'i' && kind != 'u') {
    throw py::type_error(std::string(what) + " must have an integer dtype (got " + dtype_name(a) + ")");
  }
  if (a.ndim() != 1) {
    throw py::value_error(std::string(what) + " must be 1-D (got " + std::to_string(a.ndim()) +
                          " dimensions)");
  }
  if (a.shape(0) != n) {
    throw py::value_error(std::string(what) + " has " + std::to_string(a.shape(0)) + " entries but x has " +
                          std::to_string(n) + " rows");
  }
  std::vector<Out> out(static_cast<size_t>(n));
  if (kind == 'i') {
    auto v = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    const int64_t* p = v.data();
    for (int64_t i = 0; i < n; ++i) {
      if (p[i] < 0 || static_cast<uint64_t>(p[i]) > max) {
        throw py::value_error(std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(p[i]) +
                              " is out of range [0, " + std::to_string(max) + "]");
      }
      out[i] = static_cast<Out>(p[i]);
    }
  } else {
    auto v = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    const uint64_t* p = v.data();
    for (int64_t i = 0; i < n; ++i) {
      if (p[i] > max) {
        throw py::value_error(std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(p[i]) +
                              " is out of range [0, " + std::to_string(max) + "]");
      }
      out[i] = static_cast<Out>(p[i]);
    }
  }
  return out;
}

}  // namespace

std::string dtype_name(const py::array& a) {
  return py::str(a.dtype()).cast<std::string>();
}

std::string type_name(const py::handle& h) {
  return py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>();
}

// A read-only check that `obj` is a C-contiguous float32 ndarray of shape [rows, cols] (cols < 0: any), with
// no copy or conversion.
py::array require_f32_matrix(const py::handle& obj, const char* what, int64_t cols) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error(std::string(what) + " must be a numpy.ndarray of float32 (got " + type_name(obj) +
                         ")");
  }
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(py::dtype::of<float>())) {
    throw py::type_error(std::string(what) + " must have dtype float32 (got " + dtype_name(a) +
                         "); convert with .astype(numpy.float32)");
  }
  if (a.ndim() != 2) {
    throw py::value_error(std::string(what) + " must be 2-D [num_tokens, hidden] (got " +
                          std::to_string(a.ndim()) + " dimensions)");
  }
  if (cols >= 0 && a.shape(1) != cols) {
    throw py::value_error(std::string(what) + " has rows of " + std::to_string(a.shape(1)) +
                          " values but the layer's hidden size is " + std::to_string(cols));
  }
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(what) + " must be C-contiguous (use numpy.ascontiguousarray)");
  }
  return a;
}

std::vector<TokenMeta> make_meta(const py::handle& request_ids, const py::handle& positions, int64_t n) {
  const auto ids = int_vector<uint64_t>(request_ids, "request_ids", n, UINT64_MAX);
  const auto pos = int_vector<uint32_t>(positions, "positions", n, UINT32_MAX);
  std::vector<TokenMeta> meta(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) meta[t] = TokenMeta{ids[t], pos[t]};
  return meta;
}

py::dict plan_dict(const DispatchPlan& plan) {
  const int64_t T = plan.num_tokens, k = plan.top_k, E = plan.num_experts;
  py::array_t<int32_t> expert({T, k}), slot({T, k});
  py::array_t<float> weight({T, k});
  py::array_t<uint8_t> status({T, k});
  for (int64_t p = 0; p < T * k; ++p) {
    expert.mutable_data()[p] = plan.pair_expert[p];
    slot.mutable_data()[p] = plan.pair_slot[p];
    weight.mutable_data()[p] = plan.pair_weight[p];
    status.mutable_data()[p] = static_cast<uint8_t>(plan.pair_status[p]);
  }
  py::array_t<int32_t> load(E);
  py::array_t<int64_t> capacity(E);
  for (int64_t e = 0; e < E; ++e) {
    load.mutable_data()[e] = plan.expert_load[e];
    capacity.mutable_data()[e] = plan.expert_capacity[e];
  }
  py::dict d;
  d["expert"] = expert;
  d["slot"] = slot;
  d["weight"] = weight;
  d["status"] = status;
  d["expert_load"] = load;
  d["expert_capacity"] = capacity;
  d["batch_capacity"] = plan.batch_capacity;
  d["num_kept"] = plan.num_kept;
  d["num_rerouted"] = plan.num_rerouted;
  d["num_dropped"] = plan.num_dropped;
  d["num_tokens_fully_dropped"] = plan.num_tokens_fully_dropped;
  return d;
}

}  // namespace moe::api
