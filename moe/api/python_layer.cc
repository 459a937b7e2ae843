// moe.Weights, moe.RoutingState and moe.Layer: weights from files, seeds or arrays, and the layer on any
// device.
//
// Arrays cross without copies where the memory allows: x must be a C-contiguous float32 ndarray (no
// forcecast; anything else raises TypeError/ValueError with the reason), y is a new float32 ndarray (or the
// caller's `out`). Request ids and positions are copied into the layer's reused metadata buffer (12 bytes a
// row). The GIL is released during forward; each Layer serialises its own calls with a mutex.
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/api/builders.h"
#include "moe/api/ep_factory.h"
#include "moe/api/layer_factory.h"
#include "moe/api/python_bindings.h"
#include "moe/io/checkpoint.h"
#include "moe/io/layer_weights.h"
#include "moe/io/pretrained.h"
#include "moe/layer/moe_layer.h"
#include "moe/parallel/eplb.h"
#include "router/plan_checks.h"

namespace moe::api {
namespace {

// ---- Weights ----------------------------------------------------------------------------------------------

struct PyWeights {
  std::shared_ptr<const io::LayerWeights> weights;
};

io::LayerShape make_shape(int64_t hidden, int64_t expert_ff, int num_experts, int num_shared_experts,
                          int64_t shared_ff, bool shared_expert_gate, bool score_bias) {
  io::LayerShape s;
  s.hidden = hidden;
  s.expert_ff = expert_ff;
  s.num_experts = num_experts;
  s.num_shared_experts = num_shared_experts;
  s.shared_ff = num_shared_experts > 0 ? shared_ff : 0;
  s.shared_expert_gate = shared_expert_gate;
  s.score_bias = score_bias;
  return s;
}

std::optional<kernels::DType> parse_storage(const std::optional<std::string>& s) {
  if (!s) return std::nullopt;
  if (*s == "f32" || *s == "float32") return kernels::DType::kF32;
  if (*s == "bf16" || *s == "bfloat16") return kernels::DType::kBF16;
  for (kernels::DType t : {kernels::DType::kQ8_0, kernels::DType::kQ4_K, kernels::DType::kQ6_K,
                           kernels::DType::kMXFP4, kernels::DType::kFP8}) {
    if (*s == kernels::to_string(t)) return t;
  }
  throw py::value_error("storage must be 'f32', 'bf16', 'q8_0', 'q4_k', 'q6_k', 'mxfp4' or 'fp8' (got '" +
                        *s + "')");
}

py::dict shape_dict(const io::LayerShape& s) {
  py::dict d;
  d["hidden"] = s.hidden;
  d["expert_ff"] = s.expert_ff;
  d["num_experts"] = s.num_experts;
  d["num_shared_experts"] = s.num_shared_experts;
  d["shared_ff"] = s.shared_ff;
  d["shared_expert_gate"] = s.shared_expert_gate;
  d["score_bias"] = s.score_bias;
  return d;
}

// A weight matrix from Python: float arrays are converted to a C-contiguous float32 copy (weights are copied
// anyway); uint16/int16 arrays are bf16 bit patterns (e.g. torch_tensor.view(torch.int16).numpy()).
struct HeldMatrix {
  py::array array;
  kernels::DType dtype;
};

HeldMatrix hold_matrix(const py::handle& obj, const std::string& what, int64_t rows, int64_t cols) {
  py::array a = py::isinstance<py::array>(obj) ? py::reinterpret_borrow<py::array>(obj)
                                               : py::array(py::module_::import("numpy").attr("asarray")(obj));
  HeldMatrix m;
  const char kind = a.dtype().kind();
  if (kind == 'f') {
    m.array = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
    m.dtype = kernels::DType::kF32;
  } else if ((kind == 'u' || kind == 'i') && a.itemsize() == 2) {
    m.array = py::array_t<uint16_t, py::array::c_style | py::array::forcecast>::ensure(a);
    m.dtype = kernels::DType::kBF16;
  } else {
    throw py::type_error(what + " must be a float array or 16-bit integer bf16 bits (got " + dtype_name(a) +
                         ")");
  }
  if (!m.array) throw py::type_error(what + ": could not be converted");
  const bool ok = (m.array.ndim() == 2 && m.array.shape(0) == rows && m.array.shape(1) == cols) ||
                  (m.array.ndim() == 1 && rows == 1 && m.array.shape(0) == cols);
  if (!ok) {
    std::string got = "[";
    for (py::ssize_t i = 0; i < m.array.ndim(); ++i)
      got += (i ? ", " : "") + std::to_string(m.array.shape(i));
    throw py::value_error(what + " has shape " + got + "] but expected [" + std::to_string(rows) + ", " +
                          std::to_string(cols) + "]");
  }
  return m;
}

PyWeights weights_from_arrays(const py::handle& router_gate, const py::list& gate_proj,
                              const py::list& up_proj, const py::list& down_proj,
                              const py::object& shared_gate_proj, const py::object& shared_up_proj,
                              const py::object& shared_down_proj, const py::object& shared_expert_gate,
                              const py::object& score_bias, const py::object& router_bias,
                              const py::object& gate_bias, const py::object& up_bias,
                              const py::object& down_bias) {
  // Dimensions from the arrays themselves.
  py::array rg = py::array(py::module_::import("numpy").attr("asarray")(router_gate));
  if (rg.ndim() != 2) throw py::value_error("router_gate must be 2-D [num_experts, hidden]");
  const int num_experts = static_cast<int>(rg.shape(0));
  const int64_t hidden = rg.shape(1);
  if (static_cast<int>(py::len(gate_proj)) != num_experts ||
      static_cast<int>(py::len(up_proj)) != num_experts ||
      static_cast<int>(py::len(down_proj)) != num_experts) {
    throw py::value_error("gate_proj, up_proj and down_proj must each list " + std::to_string(num_experts) +
                          " experts (router_gate has " + std::to_string(num_experts) + " rows)");
  }
  if (num_experts == 0) throw py::value_error("router_gate has no experts");
  py::array g0 = py::array(py::module_::import("numpy").attr("asarray")(gate_proj[0]));
  if (g0.ndim() != 2) throw py::value_error("gate_proj[0] must be 2-D [expert_ff, hidden]");
  const int64_t ff = g0.shape(0);
  const bool has_shared =
      !shared_gate_proj.is_none() || !shared_up_proj.is_none() || !shared_down_proj.is_none();
  int64_t sff = 0;
  if (has_shared) {
    if (shared_gate_proj.is_none())
      throw py::value_error("shared_gate_proj is required with a shared expert");
    py::array sg = py::array(py::module_::import("numpy").attr("asarray")(shared_gate_proj));
    if (sg.ndim() != 2) throw py::value_error("shared_gate_proj must be 2-D [shared_ff, hidden]");
    sff = sg.shape(0);
  }
  io::LayerShape shape = make_shape(hidden, ff, num_experts, has_shared ? 1 : 0, sff,
                                    !shared_expert_gate.is_none(), !score_bias.is_none());
  shape.router_bias = !router_bias.is_none();
  shape.expert_bias = !gate_bias.is_none() || !up_bias.is_none() || !down_bias.is_none();
  if (shape.expert_bias && (gate_bias.is_none() || up_bias.is_none() || down_bias.is_none())) {
    throw py::value_error("gate_bias, up_bias and down_bias must be given together");
  }

  std::vector<HeldMatrix> held;  // keeps converted arrays alive until the copy is made
  auto f32 = [&](const py::handle& obj, const std::string& what, int64_t rows, int64_t cols) -> const float* {
    HeldMatrix m = hold_matrix(obj, what, rows, cols);
    if (m.dtype != kernels::DType::kF32)
      throw py::type_error(what + " must be a float array (it is always fp32)");
    held.push_back(m);
    return static_cast<const float*>(held.back().array.data());
  };
  std::optional<kernels::DType> dtype;
  auto mat = [&](const py::handle& obj, const std::string& what, int64_t rows, int64_t cols) -> const void* {
    HeldMatrix m = hold_matrix(obj, what, rows, cols);
    if (dtype && *dtype != m.dtype) {
      throw py::type_error(what + " is " + std::string(kernels::to_string(m.dtype)) +
                           " but earlier expert matrices are " + std::string(kernels::to_string(*dtype)) +
                           " (all expert matrices must share one dtype)");
    }
    dtype = m.dtype;
    held.push_back(m);
    return held.back().array.data();
  };
  held.reserve(6 * num_experts + 8);

  WeightBuffers b;
  b.router_gate = f32(router_gate, "router_gate", num_experts, hidden);
  if (!score_bias.is_none()) b.score_bias = f32(score_bias, "score_bias", 1, num_experts);
  if (!router_bias.is_none()) b.router_bias = f32(router_bias, "router_bias", 1, num_experts);
  if (shape.expert_bias) {
    const py::list gb = gate_bias, ub = up_bias, db = down_bias;
    if (static_cast<int>(py::len(gb)) != num_experts || static_cast<int>(py::len(ub)) != num_experts ||
        static_cast<int>(py::len(db)) != num_experts) {
      throw py::value_error("gate_bias, up_bias and down_bias must each list " + std::to_string(num_experts) +
                            " experts");
    }
    for (int e = 0; e < num_experts; ++e) {
      std::string i = std::to_string(e);
      i = "[" + i;
      i += "]";
      b.gate_bias.push_back(f32(gb[e], "gate_bias" + i, 1, ff));
      b.up_bias.push_back(f32(ub[e], "up_bias" + i, 1, ff));
      b.down_bias.push_back(f32(db[e], "down_bias" + i, 1, hidden));
    }
  }
  for (int e = 0; e < num_experts; ++e) {
    std::string i = std::to_string(e);  // (not "[" + ...: a GCC 12 -Wrestrict false positive)
    i = "[" + i;
    i += "]";
    b.gate_proj.push_back(mat(gate_proj[e], "gate_proj" + i, ff, hidden));
    b.up_proj.push_back(mat(up_proj[e], "up_proj" + i, ff, hidden));
    b.down_proj.push_back(mat(down_proj[e], "down_proj" + i, hidden, ff));
  }
  if (has_shared) {
    if (shared_up_proj.is_none() || shared_down_proj.is_none()) {
      throw py::value_error("shared_gate_proj, shared_up_proj and shared_down_proj must be given together");
    }
    b.shared_gate_proj = mat(shared_gate_proj, "shared_gate_proj", sff, hidden);
    b.shared_up_proj = mat(shared_up_proj, "shared_up_proj", sff, hidden);
    b.shared_down_proj = mat(shared_down_proj, "shared_down_proj", hidden, sff);
  }
  if (!shared_expert_gate.is_none()) {
    if (!has_shared) throw py::value_error("shared_expert_gate needs a shared expert");
    b.shared_expert_gate = f32(shared_expert_gate, "shared_expert_gate", 1, hidden);
  }
  b.dtype = *dtype;
  PyWeights w;
  {
    py::gil_scoped_release release;
    w.weights = std::make_shared<const io::LayerWeights>(weights_from_buffers(shape, b));
  }
  return w;
}

// ---- Layer ------------------------------------------------------------------------------------------------

struct PyLayer {
  std::unique_ptr<Layer> layer;
  std::shared_ptr<const io::LayerWeights> weights;
  MoEStats stats;
  bool has_run = false;
  std::mutex mutex;  // forward() is not reentrant
};

// moe.Layer's keyword arguments as LayerOptions: 0 / None keep the preset's or the router's value.
LayerOptions make_options(const std::string& preset, const std::string& router, int top_k,
                          std::optional<bool> renormalize, int num_groups, int topk_groups,
                          double capacity_factor, const std::optional<std::string>& scope,
                          const std::optional<std::string>& priority,
                          const std::optional<std::string>& overflow,
                          const std::optional<std::string>& kernel, const std::optional<std::string>& compute,
                          int num_threads, int max_tokens, const std::string& device,
                          std::optional<int64_t> lookahead, const std::optional<std::string>& pretrained) {
  LayerOptions o;
  o.set_preset(preset);
  o.set_router(router);
  if (pretrained) {
    o = pretrained_options(o, io::read_pretrained_config(*pretrained));
  }
  if (top_k < 0)
    throw std::invalid_argument("top_k must be >= 0 (0 keeps the router's; got " + std::to_string(top_k) +
                                ")");
  if (top_k > 0) o.set_top_k(top_k);
  if (renormalize) o.set_renormalize(*renormalize ? 1 : 0);
  if (num_groups > 0) o.set_num_groups(num_groups);
  if (topk_groups > 0) o.set_topk_groups(topk_groups);
  if (capacity_factor > 0) o.set_capacity_factor(capacity_factor);
  if (scope) o.set_scope(*scope);
  if (priority) o.set_priority(*priority);
  if (overflow) o.set_overflow(*overflow);
  if (lookahead) o.set_lookahead(*lookahead);
  if (kernel) o.set_kernel(*kernel);
  if (compute) o.set_compute(*compute);
  if (num_threads < 0)
    throw std::invalid_argument("num_threads must be >= 0 (0 = 1 thread; got " + std::to_string(num_threads) +
                                ")");
  if (num_threads > 0) o.set_num_threads(num_threads);
  if (max_tokens < 0)
    throw std::invalid_argument("max_tokens must be >= 0 (0 = 256; got " + std::to_string(max_tokens) + ")");
  if (max_tokens > 0) o.set_max_tokens(max_tokens);
  o.set_device(device);
  return o;
}

void set_expert_parallel(LayerOptions& o, const std::string& backend, const std::string& planning,
                         const std::optional<std::vector<int32_t>>& placement) {
  if (o.device != "cpu") {
    throw std::invalid_argument("expert parallelism runs the CPU layer (device \"cpu\"), not \"" + o.device +
                                "\"");
  }
  o.set_expert_parallel(backend, planning);
  if (placement) o.set_expert_placement(*placement);
}

py::array_t<float> layer_forward(PyLayer& self, const py::handle& x_obj, const py::handle& request_ids,
                                 const py::handle& positions, const py::object& out, PyRoutingState* state) {
  const int64_t hidden = self.layer->hidden();
  py::array x = require_f32_matrix(x_obj, "x", hidden);
  const int64_t n = x.shape(0);
  if (n > INT32_MAX) throw py::value_error("x has too many rows");
  std::vector<TokenMeta> meta = make_meta(request_ids, positions, n);
  py::array_t<float> y;
  if (out.is_none()) {
    y = py::array_t<float>({n, hidden});
  } else {
    py::array o = require_f32_matrix(out, "out", hidden);
    if (o.shape(0) != n) {
      throw py::value_error("out has " + std::to_string(o.shape(0)) + " rows but x has " + std::to_string(n));
    }
    if (!o.writeable()) throw py::value_error("out must be writeable");
    y = py::reinterpret_borrow<py::array_t<float>>(o);
  }
  if (state != nullptr) check_routing_state(&state->state, self.layer->num_experts(), self.layer->top_k());
  const float* xp = static_cast<const float*>(x.data());
  float* yp = static_cast<float*>(y.mutable_data());
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(self.mutex);
    std::unique_lock<std::mutex> state_lock;
    if (state != nullptr) state_lock = std::unique_lock<std::mutex>(state->mutex);
    self.layer->forward(xp, static_cast<int>(n), meta, yp, state ? &state->state : nullptr, &self.stats);
    self.has_run = true;
  }
  return y;
}

// A prefix cache's segments as Python passes them (bytes each), parsed (std::invalid_argument: ValueError).
std::vector<RoutingSegment> parse_segments(const std::vector<py::bytes>& segments) {
  std::vector<RoutingSegment> prefix;
  for (const py::bytes& b : segments) {
    const std::string_view v(b);
    prefix.push_back(RoutingSegment::parse(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size())));
  }
  return prefix;
}

}  // namespace

void bind_layer(py::module_& m) {
  m.def(
      "eplb_rebalance",
      [](const std::vector<float>& load, int num_replicas, int num_groups, int num_nodes, int num_gpus) {
        return parallel::eplb::rebalance(load, num_replicas, num_groups, num_nodes, num_gpus)
            .physical_to_logical;
      },
      py::arg("load"), py::arg("num_replicas"), py::arg("num_groups"), py::arg("num_nodes"),
      py::arg("num_gpus"),
      "DeepSeek's expert-parallelism load balancer (EPLB; equal to the published eplb.py): the expert of "
      "each of "
      "num_replicas slots, slot s on GPU (rank) s // (num_replicas // num_gpus); hierarchical when num_nodes "
      "divides num_groups, else global. ValueError for what does not fit.");
  m.def(
      "pretrained_config",
      [](const std::string& dir) {
        const io::PretrainedConfig c = io::read_pretrained_config(dir);
        py::dict d;
        d["format"] = std::string(io::to_string(c.format));
        d["architecture"] = std::string(io::to_string(c.architecture));
        d["model_type"] = c.model_type;
        d["hidden"] = c.layer.hidden;
        d["expert_ff"] = c.layer.expert_ff;
        d["num_experts"] = c.layer.num_experts;
        d["num_layers"] = c.num_layers;
        d["top_k"] = c.router.top_k;
        d["renormalize"] = c.router.renormalize;
        d["scoring"] = std::string(to_string(c.router.scoring));
        d["routed_scaling_factor"] = c.router.scaling_factor;
        d["num_groups"] = c.router.num_groups;
        d["topk_groups"] = c.router.topk_groups;
        d["group_score"] = std::string(to_string(c.router.group_score));
        d["rank_by_logit"] = c.router.rank_by_logit;
        d["activation"] = std::string(kernels::to_string(c.activation));
        d["swiglu_limit"] = c.swiglu_limit;
        d["swiglu_alpha"] = c.swiglu_alpha;
        d["weight_on_input"] = c.weight_on_input;
        d["quantization"] = std::string(io::to_string(c.quantization));
        d["moe_layers"] = c.moe_layers;
        d["num_shared_experts"] = c.layer.num_shared_experts;
        d["shared_ff"] = c.layer.shared_ff;
        d["shared_expert_gate"] = c.layer.shared_expert_gate;
        d["score_bias"] = c.layer.score_bias;
        d["router_bias"] = c.layer.router_bias;
        d["expert_bias"] = c.layer.expert_bias;
        d["vocab_size"] = c.vocab_size;
        d["num_heads"] = c.num_heads;
        d["num_kv_heads"] = c.num_kv_heads;
        d["max_positions"] = c.max_positions;
        d["rms_eps"] = c.rms_eps;
        d["rope_theta"] = c.rope_theta;
        return d;
      },
      py::arg("dir"),
      "What a checkpoint says, in the project's terms: a Hugging Face directory's config.json "
      "(io::read_pretrained_config) or a GGUF file's metadata (io::read_gguf_config; format 'gguf').");
  py::class_<PyWeights>(m, "Weights",
                        "Immutable weights of one MoE layer (router gate, experts, shared expert).")
      .def_static(
          "load",
          [](const std::string& path, const std::string& architecture, int layer_index, int64_t hidden,
             int64_t expert_ff, int num_experts, int num_shared_experts, int64_t shared_ff,
             bool shared_expert_gate, bool score_bias, const std::optional<std::string>& storage) {
            const io::Architecture arch = io::parse_architecture(architecture);
            if (layer_index < 0) throw py::value_error("layer_index must be >= 0");
            const io::LayerShape shape = make_shape(hidden, expert_ff, num_experts, num_shared_experts,
                                                    shared_ff, shared_expert_gate, score_bias);
            const auto dtype = parse_storage(storage);
            PyWeights w;
            py::gil_scoped_release release;
            w.weights = std::make_shared<const io::LayerWeights>(
                io::load_layer(io::Checkpoint::open(path), arch, layer_index, shape, dtype));
            return w;
          },
          py::arg("path"), py::arg("architecture"), py::arg("layer_index"), py::arg("hidden"),
          py::arg("expert_ff"), py::arg("num_experts"), py::arg("num_shared_experts") = 0,
          py::arg("shared_ff") = 0, py::arg("shared_expert_gate") = false, py::arg("score_bias") = false,
          py::arg("storage") = py::none(),
          "Loads layer `layer_index` of a safetensors checkpoint (file, index json or directory) with the "
          "Hugging "
          "Face names of `architecture`. storage: 'f32', 'bf16' or None (the file's dtype; FP8 as stored), "
          "or 'fp8' / 'mxfp4' (the file's own format).")
      .def_static(
          "load_pretrained",
          [](const std::string& dir, int layer, const std::optional<std::string>& storage) {
            const auto dtype = parse_storage(storage);
            PyWeights w;
            py::gil_scoped_release release;
            w.weights =
                std::make_shared<const io::LayerWeights>(io::load_pretrained_layer(dir, layer, dtype));
            return w;
          },
          py::arg("dir"), py::arg("layer"), py::arg("storage") = py::none(),
          "Loads layer `layer` of a Hugging Face checkpoint directory (config.json + safetensors) or a GGUF "
          "file "
          "(single or split; llama.cpp's names and keys): the shape comes from config.json or the GGUF "
          "metadata "
          "and is checked against the tensors (ValueError naming a mismatch).")
      .def_static(
          "random",
          [](int64_t hidden, int64_t expert_ff, int num_experts, int num_shared_experts, int64_t shared_ff,
             bool shared_expert_gate, bool score_bias, const std::string& storage, uint64_t seed) {
            const io::LayerShape shape = make_shape(hidden, expert_ff, num_experts, num_shared_experts,
                                                    shared_ff, shared_expert_gate, score_bias);
            PyWeights w;
            w.weights = std::make_shared<const io::LayerWeights>(
                io::random_layer(shape, *parse_storage(storage), seed));
            return w;
          },
          py::arg("hidden"), py::arg("expert_ff"), py::arg("num_experts"), py::arg("num_shared_experts") = 0,
          py::arg("shared_ff") = 0, py::arg("shared_expert_gate") = false, py::arg("score_bias") = false,
          py::arg("storage") = "f32", py::arg("seed") = 0,
          "Seeded random weights (the same bits for the same arguments on every machine).")
      .def_static(
          "from_arrays", &weights_from_arrays, py::arg("router_gate"), py::arg("gate_proj"),
          py::arg("up_proj"), py::arg("down_proj"), py::arg("shared_gate_proj") = py::none(),
          py::arg("shared_up_proj") = py::none(), py::arg("shared_down_proj") = py::none(),
          py::arg("shared_expert_gate") = py::none(), py::arg("score_bias") = py::none(),
          py::arg("router_bias") = py::none(), py::arg("gate_bias") = py::none(),
          py::arg("up_bias") = py::none(), py::arg("down_bias") = py::none(),
          "Weights copied from arrays in nn.Linear layout: router_gate [E, d] float; per expert gate_proj "
          "(w1) and up_proj (w3) [ff, d], down_proj (w2) [d, ff], float (stored f32) or uint16/int16 bf16 "
          "bits (stored bf16); optional shared expert, shared_expert_gate [1, d], score_bias [E], "
          "router_bias [E] (gpt-oss), per-expert gate_bias / up_bias [ff] and down_bias [d] lists.")
      .def_property_readonly("shape", [](const PyWeights& w) { return shape_dict(w.weights->shape()); })
      .def_property_readonly(
          "storage", [](const PyWeights& w) { return std::string(kernels::to_string(w.weights->storage())); })
      .def_property_readonly("content_hash", [](const PyWeights& w) { return w.weights->content_hash(); })
      .def_property_readonly("zero_copy", [](const PyWeights& w) { return w.weights->zero_copy(); })
      .def_property_readonly(
          "matrix_types",
          [](const PyWeights& w) {
            std::vector<std::string> names;
            for (kernels::DType t : w.weights->matrix_types()) names.emplace_back(kernels::to_string(t));
            return names;
          },
          "The types the expert matrices are held in, in order ('q4_k', 'q6_k' for a Q4_K_M layer).")
      .def_property_readonly(
          "expert_bytes", [](const PyWeights& w) { return w.weights->expert_matrix_bytes(); },
          "Bytes of the expert matrices as held (blocks, FP8 scales included).")
      .def_property_readonly(
          "router_gate",
          [](const PyWeights& w) {
            const kernels::MatrixView& g = w.weights->router_gate();
            py::array_t<float> out({g.rows, g.cols});
            for (int64_t r = 0; r < g.rows; ++r) {
              std::memcpy(out.mutable_data(r, 0), static_cast<const float*>(g.data) + r * g.row_stride,
                          static_cast<size_t>(g.cols) * sizeof(float));
            }
            return out;
          },
          "A copy of the router gate [E, d], float32.")
      .def_property_readonly(
          "router_bias",
          [](const PyWeights& w) -> py::object {
            const std::span<const float> b = w.weights->router_bias();
            if (b.empty()) return py::none();
            py::array_t<float> out(static_cast<py::ssize_t>(b.size()));
            std::memcpy(out.mutable_data(), b.data(), b.size() * sizeof(float));
            return out;
          },
          "A copy of the router's bias [E] (gpt-oss), or None.");

  py::class_<PyRoutingState>(
      m, "RoutingState",
      "Per-request routing state of one layer, carried across forward passes (scopes 'prefix' - the "
      "deterministic preset - 'sequence' and 'causal'). Lifecycle: admit(request_id, prompt_length) - or "
      "restore(request_id, prompt_length, segments) from a prefix cache - before a request's first forward "
      "pass, forward passes with prompt chunks of any size then decode rows (several when speculating; "
      "rollback(request_id, position) forgets rejected ones), release(request_id) when it finishes. "
      "Errors raise ValueError and change nothing.")
      .def(py::init<int, int, bool>(), py::arg("num_experts"), py::arg("top_k") = 0,
           py::arg("record") = false,
           "A state for layers of num_experts experts and top_k choices (0: not checked). record=True keeps "
           "the routing of every position of its live requests (segment(); rollbacks into prompt rows).")
      .def(
          "restore",
          [](PyRoutingState& s, uint64_t id, uint32_t prompt_length, const std::vector<py::bytes>& segments) {
            const std::vector<RoutingSegment> prefix = parse_segments(segments);
            std::lock_guard<std::mutex> lock(s.mutex);
            s.state.restore(id, prompt_length, prefix);
          },
          py::arg("request_id"), py::arg("prompt_length"), py::arg("segments"),
          "Admits a request whose positions [0, P) come from a prefix cache: segments are the bytes of the "
          "cached segments of those positions, in order from 0 (segment() of the requests that computed "
          "them). "
          "ValueError, changing nothing, for a live request, malformed or non-contiguous segments, another "
          "layer shape or rule, or segments planned for a prompt length of another prefix_cache_salt.")
      .def(
          "restore",
          [](PyRoutingState& s, uint64_t id, const std::vector<uint32_t>& turn_ends,
             const std::vector<py::bytes>& segments) {
            const std::vector<RoutingSegment> prefix = parse_segments(segments);
            std::lock_guard<std::mutex> lock(s.mutex);
            s.state.restore(id, turn_ends, prefix);
          },
          py::arg("request_id"), py::arg("turn_ends"), py::arg("segments"),
          "The same for a conversation's turn (turn_ends as in admit): segments planned by earlier turns "
          "are accepted where their routing is this turn's (docs/routing.md, 'Conversations').")
      .def(
          "rollback",
          [](PyRoutingState& s, uint64_t id, uint32_t position) {
            std::lock_guard<std::mutex> lock(s.mutex);
            s.state.rollback(id, position);
          },
          py::arg("request_id"), py::arg("position"),
          "Forgets the request's positions >= position (rejected speculative tokens). ValueError, changing "
          "nothing, for an unknown request, a position past its next one or below its cache boundary, or "
          "prompt rows in a state that does not record.")
      .def(
          "segment",
          [](PyRoutingState& s, uint64_t id, uint32_t begin, uint32_t end) {
            std::vector<uint8_t> bytes;
            {
              std::lock_guard<std::mutex> lock(s.mutex);
              bytes = s.state.segment(id, begin, end).serialize();
            }
            return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          },
          py::arg("request_id"), py::arg("begin"), py::arg("end"),
          "The routing of positions [begin, end) of a live request (a recording state) as bytes: what a "
          "prefix "
          "cache keeps beside their KV, for restore().")
      .def(
          "next_position",
          [](PyRoutingState& s, uint64_t id) {
            std::lock_guard<std::mutex> lock(s.mutex);
            const RoutingState::Request* r = s.state.find(id);
            if (r == nullptr)
              throw std::invalid_argument("the state does not hold request " + std::to_string(id));
            return r->next_position;
          },
          py::arg("request_id"), "The position the request's next row must have.")
      .def_property_readonly("records", [](const PyRoutingState& s) { return s.state.records(); })
      .def(
          "admit",
          [](PyRoutingState& s, uint64_t id, uint32_t prompt_length) {
            std::lock_guard<std::mutex> lock(s.mutex);
            s.state.admit(id, prompt_length);
          },
          py::arg("request_id"), py::arg("prompt_length"),
          "Admits a request that will send prompt_length prompt tokens, then decode. ValueError if "
          "prompt_length is 0 or the request is already admitted.")
      .def(
          "admit",
          [](PyRoutingState& s, uint64_t id, const std::vector<uint32_t>& turn_ends) {
            std::lock_guard<std::mutex> lock(s.mutex);
            s.state.admit(id, turn_ends);
          },
          py::arg("request_id"), py::arg("turn_ends"),
          "Admits a conversation's turn: its prompt is the earlier turns' prompts and answers and a new "
          "message, turn_ends = [end of turn 1's prompt, end of its answer, end of turn 2's message, ..., "
          "this prompt's length] (odd length, increasing). The earlier turns' positions then route exactly "
          "as they did in their own turns, so a prefix cache may serve all of them (docs/routing.md, "
          "'Conversations'). ValueError for invalid turn ends or a request already admitted.")
      .def(
          "release",
          [](PyRoutingState& s, uint64_t id) {
            std::lock_guard<std::mutex> lock(s.mutex);
            s.state.release(id);
          },
          py::arg("request_id"), "Forgets a finished request. ValueError if the state does not hold it.")
      .def("clear",
           [](PyRoutingState& s) {
             std::lock_guard<std::mutex> lock(s.mutex);
             s.state.clear();
           })
      .def("__contains__",
           [](PyRoutingState& s, uint64_t id) {
             std::lock_guard<std::mutex> lock(s.mutex);
             return s.state.find(id) != nullptr;
           })
      .def_property_readonly("num_requests",
                             [](PyRoutingState& s) {
                               std::lock_guard<std::mutex> lock(s.mutex);
                               return s.state.num_requests();
                             })
      .def_property_readonly("num_experts", [](const PyRoutingState& s) { return s.state.num_experts(); })
      .def_property_readonly("top_k", [](const PyRoutingState& s) { return s.state.top_k(); });

  py::class_<PyLayer>(m, "Layer", "One MoE layer: gate -> route -> plan -> experts -> combine.")
      .def(py::init([](const PyWeights& w, const std::string& preset, const std::string& router, int top_k,
                       std::optional<bool> renormalize, int num_groups, int topk_groups,
                       double capacity_factor, const std::optional<std::string>& scope,
                       const std::optional<std::string>& priority, const std::optional<std::string>& overflow,
                       const std::optional<std::string>& kernel, const std::optional<std::string>& compute,
                       int num_threads, int max_tokens, const std::string& device,
                       std::optional<int64_t> lookahead, const std::optional<std::string>& pretrained,
                       const std::optional<std::string>& expert_parallel, const std::string& planning,
                       const std::optional<std::vector<int32_t>>& placement) {
             auto self = std::make_unique<PyLayer>();
             LayerOptions o = make_options(preset, router, top_k, renormalize, num_groups, topk_groups,
                                           capacity_factor, scope, priority, overflow, kernel, compute,
                                           num_threads, max_tokens, device, lookahead, pretrained);
             self->weights = w.weights;
             if (expert_parallel) {
               set_expert_parallel(o, *expert_parallel, planning, placement);
               py::gil_scoped_release release;  // collective: the other ranks may take a while
               self->layer =
                   api::make_expert_parallel_layer(o.expert_parallel, make_config(o, *w.weights), w.weights);
             } else {
               self->layer = api::make_layer(o.device, make_config(o, *w.weights), w.weights);
             }
             return self;
           }),
           py::arg("weights"), py::arg("preset") = "deterministic", py::arg("router") = "mixtral",
           py::arg("top_k") = 0, py::arg("renormalize") = py::none(), py::arg("num_groups") = 0,
           py::arg("topk_groups") = 0, py::arg("capacity_factor") = 0.0, py::arg("scope") = py::none(),
           py::arg("priority") = py::none(), py::arg("overflow") = py::none(), py::arg("kernel") = py::none(),
           py::arg("compute") = py::none(), py::arg("num_threads") = 0, py::arg("max_tokens") = 0,
           py::arg("device") = "cpu", py::arg("lookahead") = py::none(), py::arg("pretrained") = py::none(),
           py::arg("expert_parallel") = py::none(), py::arg("planning") = "global",
           py::arg("placement") = py::none(),
           "expert_parallel: \"mpi\" or \"single\": this process is one rank of an expert-parallel layer "
           "(collective construction and forward; docs/expert-parallel.md); planning \"global\" | \"home\"; "
           "placement: EPLB's physical_to_logical slots (moe.eplb_rebalance). "
           "pretrained: a checkpoint directory (or its config.json, or a GGUF file) whose router and expert "
           "semantics the "
           "layer takes (every routing key of its family; top_k= and renormalize= still override). "
           "device: \"cpu\", or \"cuda\" / \"cuda:N\" for the same layer on a CUDA device (host arrays in "
           "and out); RuntimeError naming the reason when no device is usable. compute: \"fp32\" (default) "
           "or \"bf16\" (expert GEMM inputs rounded to bf16, bf16 weights, fp32 accumulation; gates stay "
           "fp32; CPU only).")
      .def_static(
          "from_pretrained_parts",
          [](const std::string& dir, int layer_index, const std::optional<std::string>& storage,
             const std::string& expert_parallel, const std::string& planning,
             const std::optional<std::vector<int32_t>>& placement, const std::string& preset, int top_k,
             double capacity_factor, const std::optional<std::string>& scope,
             const std::optional<std::string>& priority, const std::optional<std::string>& overflow,
             const std::optional<std::string>& kernel, const std::optional<std::string>& compute,
             int num_threads, int max_tokens) {
            auto self = std::make_unique<PyLayer>();
            LayerOptions o = make_options(preset, "mixtral", top_k, std::nullopt, 0, 0, capacity_factor,
                                          scope, priority, overflow, kernel, compute, num_threads, max_tokens,
                                          "cpu", std::nullopt, std::nullopt);
            o.storage = parse_storage(storage);
            set_expert_parallel(o, expert_parallel, planning, placement);
            {
              py::gil_scoped_release release;  // collective
              self->layer = api::make_expert_parallel_layer(o, dir, layer_index);
            }
            self->weights = api::expert_parallel_info(*self->layer)->weights;
            return self;
          },
          py::arg("dir"), py::arg("layer"), py::arg("storage") = py::none(),
          py::arg("expert_parallel") = "mpi", py::arg("planning") = "global",
          py::arg("placement") = py::none(), py::arg("preset") = "deterministic", py::arg("top_k") = 0,
          py::arg("capacity_factor") = 0.0, py::arg("scope") = py::none(), py::arg("priority") = py::none(),
          py::arg("overflow") = py::none(), py::arg("kernel") = py::none(), py::arg("compute") = py::none(),
          py::arg("num_threads") = 0, py::arg("max_tokens") = 0,
          "An expert-parallel layer of a checkpoint directory, this process one rank reading only its "
          "experts (plus the router gate and the shared expert). Collective.")
      .def_property_readonly("expert_parallel",
                             [](const PyLayer& self) -> py::object {
                               const auto info = api::expert_parallel_info(*self.layer);
                               if (!info) return py::none();
                               py::dict d;
                               d["rank"] = info->rank;
                               d["world_size"] = info->world_size;
                               d["plans_locally"] = info->plans_locally;
                               d["experts"] = info->experts;
                               return d;
                             })
      .def("forward", &layer_forward, py::arg("x"), py::arg("request_ids"), py::arg("positions"),
           py::arg("out") = py::none(), py::arg("state") = nullptr,
           "y = layer(x): x C-contiguous float32 [T, hidden] (read in place), request_ids and positions "
           "integer "
           "[T]. Returns a new float32 [T, hidden] array, or writes into `out`. Releases the GIL.")
      .def(
          "last_stats",
          [](PyLayer& self) {
            MoEStats s;
            bool has_run = false;
            {
              py::gil_scoped_release release;  // (lock order: GIL released before the layer's mutex)
              std::lock_guard<std::mutex> lock(self.mutex);
              s = self.stats;
              has_run = self.has_run;
            }
            py::dict d;
            d["num_tokens"] = has_run ? s.num_tokens : 0;
            d["num_kept"] = has_run ? s.num_kept : 0;
            d["num_rerouted"] = has_run ? s.num_rerouted : 0;
            d["num_dropped"] = has_run ? s.num_dropped : 0;
            d["num_tokens_fully_dropped"] = has_run ? s.num_tokens_fully_dropped : 0;
            py::array_t<int32_t> load(self.layer->num_experts());
            for (int e = 0; e < self.layer->num_experts(); ++e) {
              load.mutable_data()[e] =
                  has_run && e < static_cast<int>(s.expert_load.size()) ? s.expert_load[e] : 0;
            }
            d["expert_load"] = load;
            return d;
          },
          "Routing outcome of the last forward pass.")
      .def(
          "last_plan",
          [](PyLayer& self) {
            DispatchPlan plan;
            bool has_run = false;
            {
              py::gil_scoped_release release;
              std::lock_guard<std::mutex> lock(self.mutex);
              has_run = self.has_run;
              if (has_run) plan = self.layer->last_plan();
            }
            if (!has_run) throw py::value_error("no forward pass has run yet");
            return plan_dict(plan);
          },
          "The dispatch plan of the last forward pass (arrays [T, top_k]: expert, slot, weight, status).")
      .def(
          "fingerprint", [](const PyLayer& self) { return self.layer->fingerprint().to_json(); },
          "Provenance of this layer's results as a JSON string.")
      .def_property_readonly("hidden", [](const PyLayer& self) { return self.layer->hidden(); })
      .def_property_readonly("num_experts", [](const PyLayer& self) { return self.layer->num_experts(); })
      .def_property_readonly("top_k", [](const PyLayer& self) { return self.layer->top_k(); })
      .def(
          "prefix_cache_salt",
          [](const PyLayer& self, uint32_t prefix_end, uint32_t prompt_length) {
            return prefix_cache_salt(self.layer->config().policy, prefix_end, prompt_length);
          },
          py::arg("prefix_end"), py::arg("prompt_length"),
          "The prefix cache's key extension for the block ending at prefix_end of a request of prompt_length "
          "tokens under this layer's dispatch rule: blocks with the same tokens route alike iff their salts "
          "are equal (0: any request; else the prompt length).")
      .def(
          "prefix_cache_salt",
          [](const PyLayer& self, uint32_t prefix_end, const std::vector<uint32_t>& turn_ends) {
            return prefix_cache_salt(self.layer->config().policy, prefix_end, turn_ends);
          },
          py::arg("prefix_end"), py::arg("turn_ends"),
          "The same for a conversation's turn of these turn ends (RoutingState.admit): equal for the blocks "
          "of an earlier turn and of this turn wherever this turn routes them alike.")
      .def_property_readonly("config", [](const PyLayer& self) { return self.layer->config().describe(); })
      .def_property_readonly("weights", [](const PyLayer& self) { return PyWeights{self.weights}; });
}

}  // namespace moe::api
