#include "moe/io/gguf_layer.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/quant_formats.h"
#include "kernels/weight_buffer.h"
#include "moe/io/dtype_convert.h"
#include "moe/io/gguf_names.h"
#include "moe/io/memory.h"
#include "moe/io/quantized.h"

namespace moe::io {

using kernels::DType;
using kernels::MatrixView;

namespace {

// What the layer's views point into besides the mapping: the converted matrices. Kept alive by the
// LayerWeights (weights_from_views' keep-alive), with the model whose mapping the other views point into.
struct GgufLayerStorage {
  std::shared_ptr<const GgufModel> model;
  std::vector<kernels::WeightBuffer> buffers;
};

// The project's dtype of a GGUF tensor type, or nullopt for the types this project does not load.
std::optional<DType> project_dtype(uint32_t type) {
  switch (static_cast<GgufTensorType>(type)) {
    case GgufTensorType::kF32:
      return DType::kF32;
    case GgufTensorType::kF16:
      return DType::kF16;
    case GgufTensorType::kBF16:
      return DType::kBF16;
    case GgufTensorType::kQ8_0:
      return DType::kQ8_0;
    case GgufTensorType::kQ4_K:
      return DType::kQ4_K;
    case GgufTensorType::kQ6_K:
      return DType::kQ6_K;
    case GgufTensorType::kMXFP4:
      return DType::kMXFP4;
  }
  return std::nullopt;
}

uint16_t load_u16(const std::byte* p) {
  return static_cast<uint16_t>(std::to_integer<uint16_t>(p[0]) | (std::to_integer<uint16_t>(p[1]) << 8));
}

// Whether an IEEE binary16 is Inf or NaN.
bool f16_not_finite(uint16_t h) {
  return (h & 0x7c00) == 0x7c00;
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

  // The rows as a matrix of `to` (nullopt: as stored - a quantized type stays itself, F16 becomes F32, and
  // the plain matrices take the first plain one's dtype). A matrix whose type is the target is a view into
  // the mapping; a plain one is converted, a quantized one dequantized exactly (each element rounded once) to
  // a plain target; for a quantized target of another type the matrix is passed as stored (or F16 widened)
  // and quantized by weights_from_views (needs_copy()). `expert`: an expert matrix (a view of one is what
  // mapped() reports; the router gate and the shared-expert gate pass kF32).
  MatrixView matrix(const Rows& r, std::optional<DType> to, bool expert = true) {
    const DType from = dtype_of(*r.tensor);
    DType target;
    if (to) {
      target = *to;
    } else if (kernels::is_quantized(from)) {
      target = from;
    } else {
      if (!plain_target_) plain_target_ = from == DType::kF16 ? DType::kF32 : from;
      target = *plain_target_;
    }
    const MatrixView stored{r.data, from, r.rows, r.cols, r.cols};
    if (kernels::is_quantized(from)) check_blocks(r, from);
    // What weights_from_views would allocate copying the layer into a quantized storage (needs_copy).
    copy_bytes_ += checked_bytes(r.rows, r.cols, kernels::is_quantized(target) ? target : DType::kF32);
    if (from == target) {
      if (expert) mapped_ = true;
      return stored;
    }
    if (kernels::is_quantized(target)) {  // weights_from_views quantizes it
      if (kernels::is_quantized(from)) {
        throw std::invalid_argument(r.name + ": a " + std::string(kernels::to_string(from)) +
                                    " matrix cannot be stored as " + std::string(kernels::to_string(target)) +
                                    " (keep it as stored, or dequantize it to f32 or bf16) in " +
                                    m_.path().string());
      }
      needs_copy_ = true;
      if (from != DType::kF16) {
        if (expert) mapped_ = true;
        return stored;
      }
      target = DType::kF32;
    }
    const uint64_t bytes = checked_bytes(r.rows, r.cols, target);
    if (storage_ == nullptr) {
      planned_ += bytes;
      return MatrixView{nullptr, target, r.rows, r.cols, r.cols};
    }
    std::byte* dst = alloc(bytes);
    const size_t out_row = kernels::row_bytes(target, r.cols);
    if (!kernels::is_quantized(from)) {
      internal::convert(r.data, from, dst, target, static_cast<size_t>(r.rows * r.cols));
      return MatrixView{dst, target, r.rows, r.cols, r.cols};
    }
    std::vector<double> exact(static_cast<size_t>(r.cols));
    const size_t es = kernels::dtype_size(target);
    for (int64_t row = 0; row < r.rows; ++row) {
      kernels::reference_row(stored, row, exact.data());
      for (int64_t i = 0; i < r.cols; ++i) {
        if (!store_rounded(exact[static_cast<size_t>(i)], target,
                           dst + static_cast<size_t>(row) * out_row + static_cast<size_t>(i) * es)) {
          throw std::invalid_argument(r.name + ": element [" + std::to_string(row) + ", " +
                                      std::to_string(i) + "] dequantizes beyond the range of " +
                                      std::string(kernels::to_string(target)) + " (" + m_.path().string() +
                                      ")");
        }
      }
    }
    return MatrixView{dst, target, r.rows, r.cols, r.cols};
  }

  // Whether some matrix must be converted by weights_from_views (a quantized storage other than its type),
  // and the bytes that copy of the whole layer takes.
  bool needs_copy() const { return needs_copy_; }
  uint64_t copy_bytes() const { return copy_bytes_; }

  // `n` fp32 values from row `row` of a tensor of rows of n elements (a 1-D vector is row 0).
  std::vector<float> floats(const GgufTensorInfo& t, int64_t row, int64_t n) const {
    const DType from = dtype_of(t);
    if (kernels::is_quantized(from)) {
      throw std::invalid_argument(std::string(t.name) + ": GGUF type " + std::string(t.type_info.name) +
                                  " is not supported for a vector (supported: F32, F16, BF16) in " +
                                  m_.path().string());
    }
    std::vector<float> v(static_cast<size_t>(n));
    internal::convert(t.data + static_cast<uint64_t>(row) * t.row_bytes(), from,
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
  DType dtype_of(const GgufTensorInfo& t) const {
    const std::optional<DType> d = project_dtype(t.type);
    if (!d) {
      throw std::invalid_argument(std::string(t.name) + ": GGUF type " + std::string(t.type_info.name) +
                                  " is not supported (supported: " + gguf_supported_tensor_types() + ") in " +
                                  m_.path().string());
    }
    return *d;
  }

  // Every block's scale of the rows is finite: Q8_0's, Q4_K's and Q6_K's fp16 d (and dmin), MXFP4's e8m0
  // (0xff is NaN). A matrix held as stored is read by the kernels as it is, so this is where a bad block is
  // refused, by name. (Reads the scales' pages of the rows: this layer's only.)
  void check_blocks(const Rows& r, DType t) const {
    if (storage_ == nullptr) return;  // the loading pass checks; planning reads no data
    const size_t bb = kernels::block_bytes(t);
    const int64_t blocks = r.cols / kernels::block_elems(t);
    for (int64_t row = 0; row < r.rows; ++row) {
      const std::byte* p = r.data + static_cast<size_t>(row) * kernels::row_bytes(t, r.cols);
      for (int64_t b = 0; b < blocks; ++b, p += bb) {
        bool bad = false;
        std::string what;
        switch (t) {
          case DType::kQ8_0:
            bad = f16_not_finite(load_u16(p));
            what = "its fp16 scale d is not finite";
            break;
          case DType::kQ4_K:
            bad = f16_not_finite(load_u16(p)) || f16_not_finite(load_u16(p + 2));
            what = "its fp16 scale d or dmin is not finite";
            break;
          case DType::kQ6_K:
            bad = f16_not_finite(load_u16(p + offsetof(kernels::BlockQ6_K, d)));
            what = "its fp16 scale d is not finite";
            break;
          case DType::kMXFP4:
            bad = std::to_integer<uint8_t>(p[0]) == 0xff;
            what = "it has the NaN scale 0xff";
            break;
          default:
            break;
        }
        if (bad) {
          throw std::invalid_argument(r.name + ": row " + std::to_string(row) + " block " +
                                      std::to_string(b) + ": " + what + " (" + m_.path().string() + ")");
        }
      }
    }
  }

  static uint64_t checked_bytes(int64_t rows, int64_t cols, DType to) {
    const uint64_t row = kernels::row_bytes(to, cols);
    if (row != 0 && static_cast<uint64_t>(rows) > std::numeric_limits<uint64_t>::max() / row) {
      throw std::invalid_argument("moe::io: matrix [" + std::to_string(rows) + ", " + std::to_string(cols) +
                                  "] is too large");
    }
    return static_cast<uint64_t>(rows) * row;
  }

  std::byte* alloc(uint64_t bytes) {
    storage_->buffers.emplace_back(static_cast<size_t>(bytes));
    return storage_->buffers.back().data();
  }

  const GgufModel& m_;
  const PretrainedConfig& c_;
  GgufLayerStorage* storage_;
  uint64_t planned_ = 0;
  bool mapped_ = false;
  bool needs_copy_ = false;
  uint64_t copy_bytes_ = 0;
  std::optional<DType> plain_target_;  // storage nullopt: the dtype of the plain matrices
};

// The views of one layer (the reader plans or loads; the views of a planning pass have null data).
struct GgufLayerViews {
  LayerViews views;
  std::vector<float> score_bias, router_bias;
  std::vector<std::vector<float>> gate_bias, up_bias, down_bias;
};

GgufLayerViews read_layer(GgufLayerReader& r, const PretrainedConfig& c, int layer,
                          std::optional<DType> storage, const ExpertSet& held = ExpertSet::all()) {
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

}  // namespace

void check_gguf_layer(const GgufModel& model, const PretrainedConfig& config, int layer_index) {
  config.layer.validate_for(config.architecture);
  GgufLayerReader planner(model, config, nullptr);
  read_layer(planner, config, layer_index, std::nullopt);
}

LayerWeights load_gguf_layer(std::shared_ptr<const GgufModel> model, const PretrainedConfig& config,
                             int layer_index, std::optional<DType> storage, const ExpertSet& experts) {
  if (model == nullptr) throw std::invalid_argument("load_gguf_layer: null model");
  const PretrainedConfig& c = config;
  c.layer.validate_for(c.architecture);
  experts.check(c.layer.num_experts);
  if (storage == DType::kF16) {
    throw std::invalid_argument(
        "moe::io: storage dtype f16 is not a storage (f32, bf16, or a quantized type)");
  }
  if (storage == DType::kFP8) {
    throw std::invalid_argument(
        "moe::io: storage fp8 is not a GGUF tensor type (GGUF files hold Q8_0, Q4_K, Q6_K "
        "and MXFP4; FP8 weights come in safetensors checkpoints)");
  }
  GgufLayerReader planner(*model, c, nullptr);
  const GgufLayerNames n(layer_index);
  planner.tensor(n.router(), {c.layer.hidden, c.layer.num_experts});  // the first tensor to report
  read_layer(planner, c, layer_index, storage, experts);
  const uint64_t bytes = planner.planned_bytes() + (planner.needs_copy() ? planner.copy_bytes() : 0);
  check_memory(bytes, "layer " + std::to_string(layer_index) + " of " + model->path().string() +
                          (storage ? " in " + std::string(kernels::to_string(*storage)) + " storage"
                                   : std::string(" as stored")));
  auto owned = std::make_shared<GgufLayerStorage>();
  owned->model = model;
  GgufLayerReader loader(*model, c, owned.get());
  GgufLayerViews v = read_layer(loader, c, layer_index, storage, experts);
  v.views.part = experts;
  v.views.score_bias = v.score_bias;
  v.views.router_bias = v.router_bias;
  for (size_t e = 0; e < v.views.experts.size() && c.layer.expert_bias; ++e) {
    v.views.experts[e].gate_bias = v.gate_bias[e];
    v.views.experts[e].up_bias = v.up_bias[e];
    v.views.experts[e].down_bias = v.down_bias[e];
  }
  // A quantized storage some matrix does not have: weights_from_views quantizes (or refuses) them all into
  // buffers of its own. Otherwise the views (into the mapping, or this reader's buffers) are kept.
  if (loader.needs_copy()) return weights_from_views(c.layer, v.views, storage, Ownership::kCopy);
  v.views.mapped = loader.mapped();
  return weights_from_views(c.layer, v.views, storage, Ownership::kBorrow, std::move(owned));
}

}  // namespace moe::io
