#include "moe/io/gguf_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/io/dtype_convert.h"
#include "moe/io/gguf_names.h"
#include "moe/io/memory.h"

namespace moe::io {

using kernels::DType;
using kernels::MatrixView;

namespace {

// What the layer's views point into besides the mapping: the converted matrices. Kept alive by the
// LayerWeights (weights_from_views' keep-alive), with the model whose mapping the other views point into.
struct GgufLayerStorage {
  std::shared_ptr<const GgufModel> model;
  std::vector<std::unique_ptr<std::byte[]>> buffers;
};

// The plain dtype of a GGUF tensor type, or nullopt for the quantized and the other types.
std::optional<DType> plain_dtype(uint32_t type) {
  switch (static_cast<GgufTensorType>(type)) {
    case GgufTensorType::kF32:
      return DType::kF32;
    case GgufTensorType::kF16:
      return DType::kF16;
    case GgufTensorType::kBF16:
      return DType::kBF16;
    default:
      return std::nullopt;
  }
}

// `rows` consecutive rows of `cols` elements of a tensor, starting at `data`: one expert's matrix of a
// stacked tensor, or a whole 2-D one. `name` says which, for messages.
struct Rows {
  const GgufTensorInfo* tensor = nullptr;
  std::string name;
  const std::byte* data = nullptr;
  int64_t rows = 0, cols = 0;
};

// Reads one layer's tensors, in two passes with the same decisions: planning (no storage: counts the bytes
// the converted matrices will take) and loading (allocates and fills).
class GgufLayerReader {
 public:
  GgufLayerReader(const GgufModel& m, const PretrainedConfig& c, GgufLayerStorage* storage)
      : m_(m), c_(c), storage_(storage) {}

  uint64_t planned_bytes() const { return planned_; }
  // Whether some matrix read as `storage` (an expert's) is a view into the mapping.
  bool mapped() const { return mapped_; }
  bool has(const std::string& name) const { return m_.tensor(name) != nullptr; }

  // The tensor `name`, whatever its shape.
  const GgufTensorInfo& find(const std::string& name) const {
    const GgufTensorInfo* t = m_.tensor(name);
    if (t == nullptr) {
      throw std::invalid_argument(name + " missing from " + m_.path().string() + " (a " +
                                  std::string(display_name(c_.architecture)) + " layer needs it)");
    }
    return *t;
  }

  // The tensor `name` with ne `want` (trailing 1s may be left out).
  const GgufTensorInfo& tensor(const std::string& name, std::initializer_list<int64_t> want) const {
    const GgufTensorInfo* t = &find(name);
    int64_t ne[4] = {1, 1, 1, 1};
    int n = 0;
    for (int64_t x : want) ne[n++] = x;
    if (!std::equal(ne, ne + 4, t->ne)) {
      std::string expected = "[";
      for (int d = 0; d < n; ++d) expected += (d ? ", " : "") + std::to_string(ne[d]);
      throw std::invalid_argument(name + ": shape " + t->shape_text() + " but expected " + expected + "] (" +
                                  m_.path().string() + ")");
    }
    return *t;
  }

  // Rows [first, first + rows) of slice `e` of a tensor whose slices are [out, cols] (ne = {cols, out, ...}).
  Rows slice(const GgufTensorInfo& t, int64_t e, int64_t first, int64_t rows, const std::string& what) const {
    const uint64_t row_bytes = t.row_bytes();
    const uint64_t row =
        static_cast<uint64_t>(e) * static_cast<uint64_t>(t.ne[1]) + static_cast<uint64_t>(first);
    return Rows{&t, what, t.data + row * row_bytes, rows, t.ne[0]};
  }

  // The storage dtype the file's matrix suggests: its own for F32 and BF16, F32 for F16.
  DType suggested_storage(const GgufTensorInfo& t) const {
    const std::optional<DType> d = plain_dtype(t.type);
    if (d == DType::kBF16) return DType::kBF16;
    if (d) return DType::kF32;
    refuse(t);
  }

  // The rows as a matrix of `to`: a view into the mapping when the type is `to`, else converted. `expert`:
  // an expert matrix (a view of one is what mapped() reports).
  MatrixView matrix(const Rows& r, DType to, bool expert = true) {
    const std::optional<DType> from = plain_dtype(r.tensor->type);
    if (!from) refuse(*r.tensor);
    if (*from == to && reinterpret_cast<uintptr_t>(r.data) % kernels::dtype_size(to) == 0) {
      if (expert) mapped_ = true;
      return MatrixView{r.data, to, r.rows, r.cols, r.cols};
    }
    const uint64_t bytes = checked_bytes(r.rows, r.cols, to);
    if (storage_ == nullptr) {
      planned_ += bytes;
      return MatrixView{nullptr, to, r.rows, r.cols, r.cols};
    }
    std::byte* dst = alloc(bytes);
    internal::convert(r.data, *from, dst, to, static_cast<size_t>(r.rows * r.cols));
    return MatrixView{dst, to, r.rows, r.cols, r.cols};
  }

  // `n` fp32 values from row `row` of a tensor of rows of n elements (a 1-D vector is row 0).
  std::vector<float> floats(const GgufTensorInfo& t, int64_t row, int64_t n) const {
    const std::optional<DType> from = plain_dtype(t.type);
    if (!from) {
      throw std::invalid_argument(std::string(t.name) + ": GGUF type " + std::string(t.type_info.name) +
                                  " is not supported for a vector (supported: F32, F16, BF16) in " +
                                  m_.path().string());
    }
    std::vector<float> v(static_cast<size_t>(n));
    internal::convert(t.data + static_cast<uint64_t>(row) * t.row_bytes(), *from,
                      reinterpret_cast<std::byte*>(v.data()), DType::kF32, v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i])) {
        throw std::invalid_argument(std::string(t.name) + ": element " + std::to_string(i) + " of row " +
                                    std::to_string(row) + " is not finite (" + m_.path().string() + ")");
      }
    }
    return v;
  }

 private:
  [[noreturn]] void refuse(const GgufTensorInfo& t) const {
    if (!gguf_tensor_type_supported(t.type)) {
      throw std::invalid_argument(std::string(t.name) + ": GGUF type " + std::string(t.type_info.name) +
                                  " is not supported (supported: " + gguf_supported_tensor_types() + ") in " +
                                  m_.path().string());
    }
    throw std::invalid_argument(std::string(t.name) + ": GGUF type " + std::string(t.type_info.name) +
                                " is a quantized format this build does not load yet (loadable: F32, F16, "
                                "BF16) in " +
                                m_.path().string());
  }

  static uint64_t checked_bytes(int64_t rows, int64_t cols, DType to) {
    const uint64_t n = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
    if (cols != 0 && n / static_cast<uint64_t>(cols) != static_cast<uint64_t>(rows)) {
      throw std::invalid_argument("moe::io: matrix [" + std::to_string(rows) + ", " + std::to_string(cols) +
                                  "] is too large");
    }
    return n * kernels::dtype_size(to);
  }

  std::byte* alloc(uint64_t bytes) {
    storage_->buffers.push_back(std::make_unique<std::byte[]>(std::max<uint64_t>(bytes, 1)));
    return storage_->buffers.back().get();
  }

  const GgufModel& m_;
  const PretrainedConfig& c_;
  GgufLayerStorage* storage_;
  uint64_t planned_ = 0;
  bool mapped_ = false;
};

// The views of one layer (the reader plans or loads; the views of a planning pass have null data).
struct GgufLayerViews {
  LayerViews views;
  std::vector<float> score_bias, router_bias;
  std::vector<std::vector<float>> gate_bias, up_bias, down_bias;
};

GgufLayerViews read_layer(GgufLayerReader& r, const PretrainedConfig& c, int layer, DType storage,
                          const ExpertSet& held = ExpertSet::all()) {
  const LayerShape& s = c.layer;
  const int64_t d = s.hidden, ff = s.expert_ff, E = s.num_experts;
  const GgufLayerNames n(layer);
  GgufLayerViews out;
  const GgufTensorInfo& gate = r.tensor(n.router(), {d, E});
  out.views.router_gate = r.matrix(r.slice(gate, 0, 0, E, n.router()), DType::kF32, /*expert=*/false);
  if (s.score_bias) out.score_bias = r.floats(r.tensor(n.score_bias(), {E}), 0, E);
  if (s.router_bias) out.router_bias = r.floats(r.tensor(n.router_bias(), {E}), 0, E);
  const bool fused = r.has(n.gate_up_exps());
  const bool per_expert =
      !fused && c.architecture == Architecture::kMixtral && !r.has(n.gate_exps()) && r.has(n.gate_expert(0));
  const GgufTensorInfo* gate_up = fused ? &r.tensor(n.gate_up_exps(), {d, 2 * ff, E}) : nullptr;
  const GgufTensorInfo* gates = fused || per_expert ? nullptr : &r.tensor(n.gate_exps(), {d, ff, E});
  const GgufTensorInfo* ups = fused || per_expert ? nullptr : &r.tensor(n.up_exps(), {d, ff, E});
  const GgufTensorInfo* downs = per_expert ? nullptr : &r.tensor(n.down_exps(), {ff, d, E});
  const GgufTensorInfo* gate_b = s.expert_bias ? &r.tensor(n.gate_exps_bias(), {ff, E}) : nullptr;
  const GgufTensorInfo* up_b = s.expert_bias ? &r.tensor(n.up_exps_bias(), {ff, E}) : nullptr;
  const GgufTensorInfo* down_b = s.expert_bias ? &r.tensor(n.down_exps_bias(), {d, E}) : nullptr;
  for (int e = 0; e < s.num_experts; ++e) {
    if (!held.contains(e)) continue;
    const std::string of = " (expert " + std::to_string(e) + ")";
    ExpertTensors t;
    if (per_expert) {
      const GgufTensorInfo& g = r.tensor(n.gate_expert(e), {d, ff});
      const GgufTensorInfo& u = r.tensor(n.up_expert(e), {d, ff});
      const GgufTensorInfo& w = r.tensor(n.down_expert(e), {ff, d});
      t.gate_proj = r.matrix(r.slice(g, 0, 0, ff, n.gate_expert(e)), storage);
      t.up_proj = r.matrix(r.slice(u, 0, 0, ff, n.up_expert(e)), storage);
      t.down_proj = r.matrix(r.slice(w, 0, 0, d, n.down_expert(e)), storage);
    } else {
      if (fused) {
        t.gate_proj = r.matrix(r.slice(*gate_up, e, 0, ff, n.gate_up_exps() + of), storage);
        t.up_proj = r.matrix(r.slice(*gate_up, e, ff, ff, n.gate_up_exps() + of), storage);
      } else {
        t.gate_proj = r.matrix(r.slice(*gates, e, 0, ff, n.gate_exps() + of), storage);
        t.up_proj = r.matrix(r.slice(*ups, e, 0, ff, n.up_exps() + of), storage);
      }
      t.down_proj = r.matrix(r.slice(*downs, e, 0, d, n.down_exps() + of), storage);
    }
    if (s.expert_bias) {
      out.gate_bias.push_back(r.floats(*gate_b, e, ff));
      out.up_bias.push_back(r.floats(*up_b, e, ff));
      out.down_bias.push_back(r.floats(*down_b, e, d));
    }
    out.views.experts.push_back(t);
  }
  if (s.num_shared_experts > 0) {
    const int64_t sff = s.shared_ff;
    ExpertTensors t;
    t.gate_proj = r.matrix(r.slice(r.tensor(n.gate_shexp(), {d, sff}), 0, 0, sff, n.gate_shexp()), storage);
    t.up_proj = r.matrix(r.slice(r.tensor(n.up_shexp(), {d, sff}), 0, 0, sff, n.up_shexp()), storage);
    t.down_proj = r.matrix(r.slice(r.tensor(n.down_shexp(), {sff, d}), 0, 0, d, n.down_shexp()), storage);
    out.views.shared = t;
  }
  if (s.shared_expert_gate) {
    const GgufTensorInfo& g = r.tensor(n.shexp_gate(), {d});
    out.views.shared_gate = r.matrix(Rows{&g, n.shexp_gate(), g.data, 1, d}, DType::kF32, /*expert=*/false);
  }
  return out;
}

// The storage dtype the file suggests: that of the experts' gate matrix (the first held expert's, in a file
// of per-expert tensors).
DType default_storage(const GgufModel& m, GgufLayerReader& r, int layer, const ExpertSet& held) {
  const GgufLayerNames n(layer);
  const int probe = held.is_all() || held.list().empty() ? 0 : held.list().front();
  const std::string first = m.tensor(n.gate_up_exps())       ? n.gate_up_exps()
                            : m.tensor(n.gate_exps())        ? n.gate_exps()
                            : m.tensor(n.gate_expert(probe)) ? n.gate_expert(probe)
                                                             : n.gate_exps();
  return r.suggested_storage(r.find(first));  // its shape is checked when it is read
}

}  // namespace

void check_gguf_layer(const GgufModel& model, const PretrainedConfig& config, int layer_index) {
  config.layer.validate_for(config.architecture);
  GgufLayerReader planner(model, config, nullptr);
  read_layer(planner, config, layer_index, default_storage(model, planner, layer_index, ExpertSet::all()));
}

LayerWeights load_gguf_layer(std::shared_ptr<const GgufModel> model, const PretrainedConfig& config,
                             int layer_index, std::optional<DType> storage, const ExpertSet& experts) {
  if (model == nullptr) throw std::invalid_argument("load_gguf_layer: null model");
  const PretrainedConfig& c = config;
  c.layer.validate_for(c.architecture);
  experts.check(c.layer.num_experts);
  GgufLayerReader planner(*model, c, nullptr);
  const GgufLayerNames n(layer_index);
  planner.tensor(n.router(), {c.layer.hidden, c.layer.num_experts});  // the first tensor to report
  if (!storage) storage = default_storage(*model, planner, layer_index, experts);
  if (*storage != DType::kF32 && *storage != DType::kBF16) {
    throw std::invalid_argument("moe::io: storage dtype must be f32 or bf16, not " +
                                std::string(kernels::to_string(*storage)));
  }
  read_layer(planner, c, layer_index, *storage, experts);
  check_memory(planner.planned_bytes(), "layer " + std::to_string(layer_index) + " of " +
                                            model->path().string() + " in " +
                                            std::string(kernels::to_string(*storage)) + " storage");
  auto owned = std::make_shared<GgufLayerStorage>();
  owned->model = model;
  GgufLayerReader loader(*model, c, owned.get());
  GgufLayerViews v = read_layer(loader, c, layer_index, *storage, experts);
  v.views.mapped = loader.mapped();
  v.views.part = experts;
  v.views.score_bias = v.score_bias;
  v.views.router_bias = v.router_bias;
  for (size_t e = 0; e < v.views.experts.size() && c.layer.expert_bias; ++e) {
    v.views.experts[e].gate_bias = v.gate_bias[e];
    v.views.experts[e].up_bias = v.up_bias[e];
    v.views.experts[e].down_bias = v.down_bias[e];
  }
  return weights_from_views(c.layer, v.views, *storage, Ownership::kBorrow, std::move(owned));
}

}  // namespace moe::io
