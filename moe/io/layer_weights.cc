#include "moe/io/layer_weights.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include "base/splitmix64.h"
#include "moe/io/dtype_convert.h"
#include "moe/io/safetensors.h"

namespace moe::io {

using kernels::DType;
using kernels::MatrixView;

namespace {

enum class Proj { kGate, kUp, kDown };
constexpr Proj kProjs[] = {Proj::kGate, Proj::kUp, Proj::kDown};

std::string_view display_name(Architecture arch) {
  switch (arch) {
    case Architecture::kMixtral:
      return "Mixtral";
    case Architecture::kQwen2Moe:
      return "Qwen2-MoE";
    case Architecture::kDeepseekV3:
      return "DeepSeek-V3";
    case Architecture::kOlmoe:
      return "OLMoE";
  }
  return "?";
}

// Hugging Face tensor names of one layer.
class HfNames {
 public:
  HfNames(Architecture arch, int layer) : arch_(arch) {
    prefix_ = "model.layers." + std::to_string(layer) +
              (arch == Architecture::kMixtral ? ".block_sparse_moe." : ".mlp.");
  }
  std::string router_gate() const { return prefix_ + "gate.weight"; }
  std::string score_bias() const { return prefix_ + "gate.e_score_correction_bias"; }
  std::string expert(int e, Proj p) const {
    const std::string base = prefix_ + "experts." + std::to_string(e) + ".";
    if (arch_ == Architecture::kMixtral) {
      return base + (p == Proj::kGate ? "w1.weight" : p == Proj::kUp ? "w3.weight" : "w2.weight");
    }
    return base + proj_name(p);
  }
  std::string shared(Proj p) const {
    return prefix_ + (arch_ == Architecture::kDeepseekV3 ? "shared_experts." : "shared_expert.") +
           proj_name(p);
  }
  std::string shared_gate() const { return prefix_ + "shared_expert_gate.weight"; }

 private:
  static std::string proj_name(Proj p) {
    return p == Proj::kGate ? "gate_proj.weight" : p == Proj::kUp ? "up_proj.weight" : "down_proj.weight";
  }
  Architecture arch_;
  std::string prefix_;
};

// Canonical, architecture-independent names used by content_hash and the random streams.
std::string canonical_expert(int e, Proj p) {
  return "experts." + std::to_string(e) +
         (p == Proj::kGate ? ".gate_proj"
          : p == Proj::kUp ? ".up_proj"
                           : ".down_proj");
}
std::string canonical_shared(Proj p) {
  return std::string("shared") + (p == Proj::kGate ? ".gate_proj"
                                  : p == Proj::kUp ? ".up_proj"
                                                   : ".down_proj");
}

std::string shape_string(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

size_t checked_bytes(int64_t rows, int64_t cols, DType dtype) {
  const uint64_t r = static_cast<uint64_t>(rows), c = static_cast<uint64_t>(cols),
                 s = kernels::dtype_size(dtype);
  if (rows < 0 || cols < 0 || (c != 0 && r > std::numeric_limits<size_t>::max() / c / s)) {
    throw std::invalid_argument("moe::io: matrix [" + std::to_string(rows) + ", " + std::to_string(cols) +
                                "] is too large");
  }
  return static_cast<size_t>(r * c * s);
}

// Uniform in [-bound, bound) from splitmix64 (base/splitmix64.h): a 24-bit uniform in [0, 1) mapped in
// double (every step exact or correctly rounded IEEE arithmetic), then rounded once to float.
float uniform_in(SplitMix64& rng, double bound) {
  const double u = static_cast<double>(rng.next() >> 40) * 0x1p-24;
  return static_cast<float>((2.0 * u - 1.0) * bound);
}

uint64_t stream_seed(uint64_t seed, const std::string& canonical_name) {
  return XXH3_64bits_withSeed(canonical_name.data(), canonical_name.size(), seed);
}

}  // namespace

Architecture parse_architecture(std::string_view name) {
  std::string s(name);
  for (char& c : s) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "mixtral") return Architecture::kMixtral;
  if (s == "qwen2-moe") return Architecture::kQwen2Moe;
  if (s == "deepseek-v3") return Architecture::kDeepseekV3;
  if (s == "olmoe") return Architecture::kOlmoe;
  throw std::invalid_argument("unknown architecture '" + std::string(name) +
                              "' (expected one of: mixtral, qwen2-moe, deepseek-v3, olmoe)");
}

std::string_view to_string(Architecture arch) {
  switch (arch) {
    case Architecture::kMixtral:
      return "mixtral";
    case Architecture::kQwen2Moe:
      return "qwen2-moe";
    case Architecture::kDeepseekV3:
      return "deepseek-v3";
    case Architecture::kOlmoe:
      return "olmoe";
  }
  return "?";
}

void LayerShape::validate() const {
  auto fail = [](const std::string& what) { throw std::invalid_argument("LayerShape: " + what); };
  if (hidden <= 0) fail("hidden (" + std::to_string(hidden) + ") must be positive");
  if (expert_ff <= 0) fail("expert_ff (" + std::to_string(expert_ff) + ") must be positive");
  if (num_experts <= 0) fail("num_experts (" + std::to_string(num_experts) + ") must be positive");
  if (num_shared_experts < 0)
    fail("num_shared_experts (" + std::to_string(num_shared_experts) + ") is negative");
  if (num_shared_experts > 0 && shared_ff <= 0) {
    fail("shared_ff (" + std::to_string(shared_ff) + ") must be positive with " +
         std::to_string(num_shared_experts) + " shared expert(s)");
  }
  if (shared_expert_gate && num_shared_experts == 0) fail("shared_expert_gate requires a shared expert");
}

void LayerShape::validate_for(Architecture arch) const {
  validate();
  const std::string who = std::string(to_string(arch)) + " layers ";
  auto fail = [&](const std::string& what) { throw std::invalid_argument("LayerShape: " + who + what); };
  switch (arch) {
    case Architecture::kMixtral:
    case Architecture::kOlmoe:
      if (num_shared_experts != 0) fail("have no shared expert (num_shared_experts must be 0)");
      if (score_bias) fail("have no score bias");
      break;
    case Architecture::kQwen2Moe:
      if (num_shared_experts > 1) fail("have at most one shared expert");
      if (score_bias) fail("have no score bias");
      break;
    case Architecture::kDeepseekV3:
      if (shared_expert_gate) fail("have no shared_expert_gate");
      if (!score_bias) fail("carry e_score_correction_bias (set score_bias)");
      break;
  }
}

// Builds a LayerWeights: the friend of LayerWeights that owns the private members' filling.
class LayerBuilder {
 public:
  LayerBuilder(const LayerShape& shape, DType storage) {
    if (storage != DType::kF32 && storage != DType::kBF16) {
      throw std::invalid_argument("moe::io: storage dtype must be f32 or bf16, not " +
                                  std::string(kernels::to_string(storage)));
    }
    w_.shape_ = shape;
    w_.storage_ = storage;
  }

  LayerWeights& weights() { return w_; }

  // An owned, zero-initialised buffer of `bytes` bytes that lives as long as the LayerWeights.
  std::byte* alloc(size_t bytes) {
    w_.owned_.push_back(std::make_unique<std::byte[]>(std::max<size_t>(bytes, 1)));
    return w_.owned_.back().get();
  }

  // Copies `src` (rows x cols of `from`, contiguous, any alignment) into an owned matrix of dtype `to`.
  MatrixView owned_matrix(const std::byte* src, DType from, int64_t rows, int64_t cols, DType to) {
    std::byte* dst = alloc(checked_bytes(rows, cols, to));
    internal::convert(src, from, dst, to, static_cast<size_t>(rows) * static_cast<size_t>(cols));
    return MatrixView{dst, to, rows, cols, cols};
  }

  MatrixView random_matrix(const std::string& canonical, int64_t rows, int64_t cols, DType to,
                           uint64_t seed) {
    std::vector<float> values(static_cast<size_t>(rows) * static_cast<size_t>(cols));
    SplitMix64 rng(stream_seed(seed, canonical));
    const double bound = 1.0 / std::sqrt(static_cast<double>(cols));
    for (float& v : values) v = uniform_in(rng, bound);
    return owned_matrix(reinterpret_cast<const std::byte*>(values.data()), DType::kF32, rows, cols, to);
  }

  void set_router_gate(MatrixView v) { w_.router_gate_ = v; }
  void set_score_bias(std::vector<float> b) { w_.score_bias_ = std::move(b); }
  void add_expert(ExpertTensors e) { w_.experts_.push_back(e); }
  void set_shared(ExpertTensors e) { w_.shared_ = e; }
  void set_shared_gate(MatrixView v) { w_.shared_gate_ = v; }
  void set_checkpoint(std::shared_ptr<const Checkpoint> c) { w_.checkpoint_ = std::move(c); }
  void set_keep_alive(std::shared_ptr<const void> owner) { w_.keep_alive_ = std::move(owner); }

  // A caller's matrix: borrowed as it is, or copied (and converted to `to`) row by row into an owned one.
  MatrixView caller_matrix(const MatrixView& v, DType to, Ownership ownership) {
    if (ownership == Ownership::kBorrow) return v;
    std::byte* dst = alloc(checked_bytes(v.rows, v.cols, to));
    const size_t in_row = static_cast<size_t>(v.row_stride) * kernels::dtype_size(v.dtype);
    const size_t out_row = static_cast<size_t>(v.cols) * kernels::dtype_size(to);
    for (int64_t r = 0; r < v.rows; ++r) {
      internal::convert(static_cast<const std::byte*>(v.data) + static_cast<size_t>(r) * in_row, v.dtype,
                        dst + static_cast<size_t>(r) * out_row, to, static_cast<size_t>(v.cols));
    }
    return MatrixView{dst, to, v.rows, v.cols, v.cols};
  }
  void mark_zero_copy() { w_.zero_copy_ = true; }

 private:
  LayerWeights w_;
};

namespace {

// Finds `name` in the checkpoint with exactly `shape`, or throws a message naming it.
const TensorInfo& require(const Checkpoint& ckpt, Architecture arch, const std::string& name,
                          std::initializer_list<int64_t> shape) {
  const TensorInfo* info = ckpt.find(name);
  if (info == nullptr) {
    throw std::invalid_argument(name + " missing from checkpoint " + ckpt.path().string() + " (a " +
                                std::string(display_name(arch)) + " layer needs it)");
  }
  if (!std::equal(info->shape.begin(), info->shape.end(), shape.begin(), shape.end())) {
    throw std::invalid_argument(name + ": shape " + shape_string(info->shape) + " but expected " +
                                shape_string(std::span<const int64_t>(shape.begin(), shape.size())) +
                                " (checkpoint " + ckpt.path().string() + ")");
  }
  return *info;
}

// A matrix of the layer: a view into the checkpoint when dtype and alignment allow, else an owned copy.
MatrixView load_matrix(LayerBuilder& b, const Checkpoint& ckpt, Architecture arch, const std::string& name,
                       int64_t rows, int64_t cols, DType to) {
  const TensorInfo& info = require(ckpt, arch, name, {rows, cols});
  const bool aligned = reinterpret_cast<uintptr_t>(info.data) % kernels::dtype_size(info.dtype) == 0;
  if (info.dtype == to && aligned) {
    b.mark_zero_copy();
    return MatrixView{info.data, to, rows, cols, cols};
  }
  return b.owned_matrix(info.data, info.dtype, rows, cols, to);
}

// Appends one tensor to `out`, copying only when the view is strided.
void add_tensor(std::vector<TensorToWrite>& out, std::vector<std::vector<std::byte>>& scratch,
                std::string name, const MatrixView& v, std::vector<int64_t> shape) {
  const size_t esize = kernels::dtype_size(v.dtype);
  const size_t row_bytes = static_cast<size_t>(v.cols) * esize;
  const auto* base = static_cast<const std::byte*>(v.data);
  std::span<const std::byte> bytes;
  if (v.row_stride == v.cols || v.rows <= 1) {
    bytes = {base, row_bytes * static_cast<size_t>(v.rows)};
  } else {
    auto& buf = scratch.emplace_back(row_bytes * static_cast<size_t>(v.rows));
    for (int64_t r = 0; r < v.rows; ++r) {
      std::memcpy(buf.data() + static_cast<size_t>(r) * row_bytes,
                  base + static_cast<size_t>(r * v.row_stride) * esize, row_bytes);
    }
    bytes = buf;
  }
  out.push_back(
      TensorToWrite{std::move(name), std::string(safetensors_dtype_name(v.dtype)), std::move(shape), bytes});
}

struct Hasher {
  Hasher() : state(XXH3_createState()) {
    if (state == nullptr) throw std::bad_alloc();
    XXH3_64bits_reset(state);
  }
  ~Hasher() { XXH3_freeState(state); }
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  void bytes(const void* p, size_t n) {
    if (n != 0) XXH3_64bits_update(state, p, n);
  }
  void u64(uint64_t v) { bytes(&v, sizeof(v)); }
  void str(std::string_view s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void tensor(std::string_view name, DType dtype, std::initializer_list<int64_t> shape, const void* data,
              int64_t rows, int64_t cols, int64_t row_stride) {
    str(name);
    str(kernels::to_string(dtype));
    u64(shape.size());
    for (int64_t d : shape) u64(static_cast<uint64_t>(d));
    const size_t esize = kernels::dtype_size(dtype);
    for (int64_t r = 0; r < rows; ++r) {
      bytes(static_cast<const std::byte*>(data) + static_cast<size_t>(r * row_stride) * esize,
            static_cast<size_t>(cols) * esize);
    }
  }
  void matrix(std::string_view name, const MatrixView& v) {
    tensor(name, v.dtype, {v.rows, v.cols}, v.data, v.rows, v.cols, v.row_stride);
  }
  uint64_t digest() const { return XXH3_64bits_digest(state); }

  XXH3_state_t* state;
};

}  // namespace

uint64_t LayerWeights::content_hash() const {
  static_assert(std::endian::native == std::endian::little, "content_hash hashes little-endian bytes");
  Hasher h;
  h.str("moe.io.LayerWeights.v1");
  h.matrix("router_gate", router_gate_);
  if (!score_bias_.empty()) {
    const auto n = static_cast<int64_t>(score_bias_.size());
    h.tensor("score_bias", DType::kF32, {n}, score_bias_.data(), 1, n, n);
  }
  for (size_t e = 0; e < experts_.size(); ++e) {
    const int ei = static_cast<int>(e);
    h.matrix(canonical_expert(ei, Proj::kGate), experts_[e].gate_proj);
    h.matrix(canonical_expert(ei, Proj::kUp), experts_[e].up_proj);
    h.matrix(canonical_expert(ei, Proj::kDown), experts_[e].down_proj);
  }
  if (shared_) {
    h.matrix(canonical_shared(Proj::kGate), shared_->gate_proj);
    h.matrix(canonical_shared(Proj::kUp), shared_->up_proj);
    h.matrix(canonical_shared(Proj::kDown), shared_->down_proj);
  }
  if (shared_gate_) h.matrix("shared_gate", *shared_gate_);
  return h.digest();
}

LayerWeights load_layer(std::shared_ptr<const Checkpoint> checkpoint, Architecture arch, int layer_index,
                        const LayerShape& expected, std::optional<DType> storage) {
  if (checkpoint == nullptr) throw std::invalid_argument("load_layer: null checkpoint");
  if (layer_index < 0)
    throw std::invalid_argument("load_layer: negative layer index " + std::to_string(layer_index));
  expected.validate_for(arch);
  const Checkpoint& ckpt = *checkpoint;
  const HfNames names(arch, layer_index);
  const int64_t d = expected.hidden, ff = expected.expert_ff, num_experts = expected.num_experts;

  require(ckpt, arch, names.router_gate(),
          {num_experts, d});  // the first name to report if the file is wrong
  if (!storage) {
    const TensorInfo& first = require(ckpt, arch, names.expert(0, Proj::kGate), {ff, d});
    storage = first.dtype == DType::kF16 ? DType::kF32 : first.dtype;
  }
  LayerBuilder b(expected, *storage);
  b.set_checkpoint(checkpoint);

  b.set_router_gate(load_matrix(b, ckpt, arch, names.router_gate(), num_experts, d, DType::kF32));
  if (expected.score_bias) {
    const TensorInfo& info = require(ckpt, arch, names.score_bias(), {num_experts});
    std::vector<float> bias(static_cast<size_t>(num_experts));
    internal::convert(info.data, info.dtype, reinterpret_cast<std::byte*>(bias.data()), DType::kF32,
                      bias.size());
    b.set_score_bias(std::move(bias));
  }
  for (int e = 0; e < expected.num_experts; ++e) {
    b.add_expert(ExpertTensors{load_matrix(b, ckpt, arch, names.expert(e, Proj::kGate), ff, d, *storage),
                               load_matrix(b, ckpt, arch, names.expert(e, Proj::kUp), ff, d, *storage),
                               load_matrix(b, ckpt, arch, names.expert(e, Proj::kDown), d, ff, *storage)});
  }
  if (expected.num_shared_experts > 0) {
    const int64_t sff = expected.shared_ff;
    b.set_shared(ExpertTensors{load_matrix(b, ckpt, arch, names.shared(Proj::kGate), sff, d, *storage),
                               load_matrix(b, ckpt, arch, names.shared(Proj::kUp), sff, d, *storage),
                               load_matrix(b, ckpt, arch, names.shared(Proj::kDown), d, sff, *storage)});
  }
  if (expected.shared_expert_gate) {
    b.set_shared_gate(load_matrix(b, ckpt, arch, names.shared_gate(), 1, d, DType::kF32));
  }
  return std::move(b.weights());
}

namespace {

// Checks one caller view: set, of dtype `dtype` (or any file dtype when `any_dtype`), [rows, cols], rows
// `row_stride` >= cols apart.
void check_view(const std::string& name, const MatrixView& v, int64_t rows, int64_t cols, DType dtype,
                bool any_dtype) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("weights_from_views: " + name + ": " + what);
  };
  if (v.data == nullptr) fail("data is null");
  if (v.rows != rows || v.cols != cols) {
    fail("[" + std::to_string(v.rows) + ", " + std::to_string(v.cols) + "] but the shape needs [" +
         std::to_string(rows) + ", " + std::to_string(cols) + "]");
  }
  if (v.row_stride < v.cols) {
    fail("row_stride " + std::to_string(v.row_stride) + " is below cols " + std::to_string(v.cols));
  }
  if (!any_dtype && v.dtype != dtype) {
    fail("dtype " + std::string(kernels::to_string(v.dtype)) + " but " +
         std::string(kernels::to_string(dtype)) + " is needed");
  }
}

}  // namespace

LayerWeights weights_from_views(const LayerShape& shape, const LayerViews& views, DType storage,
                                Ownership ownership, std::shared_ptr<const void> keep_alive) {
  shape.validate();
  LayerBuilder b(shape, storage);  // rejects kF16 storage
  const bool copy = ownership == Ownership::kCopy;
  const int64_t d = shape.hidden, ff = shape.expert_ff, E = shape.num_experts;
  auto fail = [](const std::string& what) { throw std::invalid_argument("weights_from_views: " + what); };

  check_view("router_gate", views.router_gate, E, d, DType::kF32, false);
  if (shape.score_bias != !views.score_bias.empty()) {
    fail(shape.score_bias ? "score_bias is required (shape.score_bias is set)"
                          : "score_bias given but shape.score_bias is not set");
  }
  if (shape.score_bias && static_cast<int64_t>(views.score_bias.size()) != E) {
    fail("score_bias has " + std::to_string(views.score_bias.size()) + " values, the shape needs " +
         std::to_string(E));
  }
  if (static_cast<int64_t>(views.experts.size()) != E) {
    fail(std::to_string(views.experts.size()) + " experts given, the shape has " + std::to_string(E));
  }
  // The expert matrices share one dtype: the storage dtype when borrowed, any file dtype when copied.
  const DType expert_dtype = views.experts.empty() ? storage : views.experts[0].gate_proj.dtype;
  if (expert_dtype != DType::kF32 && expert_dtype != DType::kBF16 && !(copy && expert_dtype == DType::kF16)) {
    fail("expert matrices must be f32 or bf16 (f16 only with Ownership::kCopy)");
  }
  const DType want = copy ? expert_dtype : storage;
  auto check_ffn = [&](const std::string& name, const ExpertTensors& t, int64_t f) {
    check_view(name + ".gate_proj", t.gate_proj, f, d, want, false);
    check_view(name + ".up_proj", t.up_proj, f, d, want, false);
    check_view(name + ".down_proj", t.down_proj, d, f, want, false);
  };
  for (int64_t e = 0; e < E; ++e) check_ffn("experts[" + std::to_string(e) + "]", views.experts[e], ff);
  if ((shape.num_shared_experts > 0) != views.shared.has_value()) {
    fail(shape.num_shared_experts > 0 ? "the shape has a shared expert but no shared views were given"
                                      : "shared expert views given but shape.num_shared_experts is 0");
  }
  if (views.shared) check_ffn("shared", *views.shared, shape.shared_ff);
  if (shape.shared_expert_gate != views.shared_gate.has_value()) {
    fail(shape.shared_expert_gate ? "shared_gate is required (shape.shared_expert_gate is set)"
                                  : "shared_gate given but shape.shared_expert_gate is not set");
  }
  if (views.shared_gate) check_view("shared_gate", *views.shared_gate, 1, d, DType::kF32, false);

  // Everything checked: build.
  b.set_keep_alive(std::move(keep_alive));
  b.set_router_gate(b.caller_matrix(views.router_gate, DType::kF32, ownership));
  if (shape.score_bias)
    b.set_score_bias(std::vector<float>(views.score_bias.begin(), views.score_bias.end()));
  auto ffn = [&](const ExpertTensors& t) {
    return ExpertTensors{b.caller_matrix(t.gate_proj, storage, ownership),
                         b.caller_matrix(t.up_proj, storage, ownership),
                         b.caller_matrix(t.down_proj, storage, ownership)};
  };
  for (const ExpertTensors& t : views.experts) b.add_expert(ffn(t));
  if (views.shared) b.set_shared(ffn(*views.shared));
  if (views.shared_gate) b.set_shared_gate(b.caller_matrix(*views.shared_gate, DType::kF32, ownership));
  return std::move(b.weights());
}

LayerWeights random_layer(const LayerShape& shape, DType storage, uint64_t seed) {
  shape.validate();
  LayerBuilder b(shape, storage);
  const int64_t d = shape.hidden, ff = shape.expert_ff;
  b.set_router_gate(b.random_matrix("router_gate", shape.num_experts, d, DType::kF32, seed));
  if (shape.score_bias) {
    std::vector<float> bias(static_cast<size_t>(shape.num_experts));
    SplitMix64 rng(stream_seed(seed, "score_bias"));
    for (float& v : bias) v = uniform_in(rng, 0.05);
    b.set_score_bias(std::move(bias));
  }
  for (int e = 0; e < shape.num_experts; ++e) {
    b.add_expert(ExpertTensors{b.random_matrix(canonical_expert(e, Proj::kGate), ff, d, storage, seed),
                               b.random_matrix(canonical_expert(e, Proj::kUp), ff, d, storage, seed),
                               b.random_matrix(canonical_expert(e, Proj::kDown), d, ff, storage, seed)});
  }
  if (shape.num_shared_experts > 0) {
    const int64_t sff = shape.shared_ff;
    b.set_shared(ExpertTensors{b.random_matrix(canonical_shared(Proj::kGate), sff, d, storage, seed),
                               b.random_matrix(canonical_shared(Proj::kUp), sff, d, storage, seed),
                               b.random_matrix(canonical_shared(Proj::kDown), d, sff, storage, seed)});
  }
  if (shape.shared_expert_gate) b.set_shared_gate(b.random_matrix("shared_gate", 1, d, DType::kF32, seed));
  return std::move(b.weights());
}

void save_layer(const LayerWeights& weights, Architecture arch, int layer_index,
                const std::filesystem::path& path) {
  if (layer_index < 0)
    throw std::invalid_argument("save_layer: negative layer index " + std::to_string(layer_index));
  const LayerShape& shape = weights.shape();
  shape.validate_for(arch);
  const HfNames names(arch, layer_index);
  std::vector<TensorToWrite> tensors;
  std::vector<std::vector<std::byte>> scratch;
  // Spans point at each scratch buffer's heap storage, which stays put when `scratch` itself grows.
  const MatrixView& gate = weights.router_gate();
  add_tensor(tensors, scratch, names.router_gate(), gate, {gate.rows, gate.cols});
  if (shape.score_bias) {
    const auto bias = weights.score_bias();
    tensors.push_back(
        TensorToWrite{names.score_bias(), "F32", {static_cast<int64_t>(bias.size())}, std::as_bytes(bias)});
  }
  const auto experts = weights.experts();
  for (size_t e = 0; e < experts.size(); ++e) {
    const int ei = static_cast<int>(e);
    for (Proj p : kProjs) {
      const MatrixView& v = p == Proj::kGate ? experts[e].gate_proj
                            : p == Proj::kUp ? experts[e].up_proj
                                             : experts[e].down_proj;
      add_tensor(tensors, scratch, names.expert(ei, p), v, {v.rows, v.cols});
    }
  }
  if (weights.shared()) {
    for (Proj p : kProjs) {
      const ExpertTensors& s = *weights.shared();
      const MatrixView& v = p == Proj::kGate ? s.gate_proj : p == Proj::kUp ? s.up_proj : s.down_proj;
      add_tensor(tensors, scratch, names.shared(p), v, {v.rows, v.cols});
    }
  }
  if (weights.shared_gate()) {
    const MatrixView& v = *weights.shared_gate();
    add_tensor(tensors, scratch, names.shared_gate(), v, {v.rows, v.cols});
  }
  write_safetensors(path, tensors, {{"format", "pt"}, {"moe.architecture", std::string(to_string(arch))}});
}

}  // namespace moe::io
