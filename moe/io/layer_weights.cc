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
#include "kernels/bf16.h"
#include "kernels/quant_formats.h"
#include "moe/io/dtype_convert.h"
#include "moe/io/memory.h"
#include "moe/io/safetensors.h"

namespace moe::io {

using kernels::DType;
using kernels::MatrixView;

namespace {

enum class Proj { kGate, kUp, kDown };
constexpr Proj kProjs[] = {Proj::kGate, Proj::kUp, Proj::kDown};

// Whether a family stores its routed experts fused per layer ([E, in, out] tensors) rather than one matrix
// per expert and projection.
bool fused_experts(Architecture arch) {
  return arch == Architecture::kGptOss || arch == Architecture::kLlama4;
}

// Hugging Face tensor names of one layer. `root` is what precedes "layers.{i}." (model., or Llama 4's
// multimodal language_model.model.).
class HfNames {
 public:
  HfNames(Architecture arch, int layer, const std::string& root = "model.") : arch_(arch) {
    const char* block = arch == Architecture::kMixtral  ? "block_sparse_moe."
                        : arch == Architecture::kLlama4 ? "feed_forward."
                                                        : "mlp.";
    prefix_ = root + "layers." + std::to_string(layer) + "." + block;
  }
  std::string router_gate() const {
    return prefix_ + (fused_experts(arch_) ? "router.weight" : "gate.weight");
  }
  std::string router_bias() const { return prefix_ + "router.bias"; }
  std::string score_bias() const { return prefix_ + "gate.e_score_correction_bias"; }
  std::string expert(int e, Proj p) const {
    const std::string base = prefix_ + "experts." + std::to_string(e) + ".";
    if (arch_ == Architecture::kMixtral) {
      return base + (p == Proj::kGate ? "w1.weight" : p == Proj::kUp ? "w3.weight" : "w2.weight");
    }
    return base + proj_name(p);
  }
  // The fused experts (gpt-oss, Llama 4): gate_up_proj [E, d, 2 ff], down_proj [E, ff, d], their biases, and
  // the MXFP4 forms (<name>_blocks, <name>_scales).
  std::string fused_gate_up() const { return prefix_ + "experts.gate_up_proj"; }
  std::string fused_down() const { return prefix_ + "experts.down_proj"; }
  std::string shared(Proj p) const {
    const bool plural = arch_ == Architecture::kDeepseekV3 || arch_ == Architecture::kDeepseekV2 ||
                        arch_ == Architecture::kGlm4Moe;
    return prefix_ + (plural ? "shared_experts." : "shared_expert.") + proj_name(p);
  }
  std::string shared_gate() const { return prefix_ + "shared_expert_gate.weight"; }

 private:
  static std::string proj_name(Proj p) {
    return p == Proj::kGate ? "gate_proj.weight" : p == Proj::kUp ? "up_proj.weight" : "down_proj.weight";
  }
  Architecture arch_;
  std::string prefix_;
};

// The root of a Llama 4 checkpoint's layer tensors: language_model.model. when the file has the multimodal
// names, else model.
std::string llama4_root(const Checkpoint& ckpt, int layer) {
  const std::string mm = "language_model.model.";
  return ckpt.contains(HfNames(Architecture::kLlama4, layer, mm).router_gate()) ? mm : "model.";
}

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

// Bytes of a contiguous [rows, cols] matrix of `dtype` (whole blocks per row; FP8's scales not included).
size_t checked_bytes(int64_t rows, int64_t cols, DType dtype) {
  const int64_t be = kernels::block_elems(dtype);
  const uint64_t r = static_cast<uint64_t>(rows), c = static_cast<uint64_t>(cols / be),
                 s = kernels::block_bytes(dtype);
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

namespace {

struct ArchName {
  Architecture arch;
  const char* name;
  const char* display;
};
constexpr ArchName kArchNames[] = {
    {Architecture::kMixtral, "mixtral", "Mixtral"},
    {Architecture::kQwen2Moe, "qwen2-moe", "Qwen2-MoE"},
    {Architecture::kDeepseekV3, "deepseek-v3", "DeepSeek-V3"},
    {Architecture::kOlmoe, "olmoe", "OLMoE"},
    {Architecture::kQwen3Moe, "qwen3-moe", "Qwen3-MoE"},
    {Architecture::kDeepseekV2, "deepseek-v2", "DeepSeek-V2"},
    {Architecture::kGlm4Moe, "glm4-moe", "GLM-4.5"},
    {Architecture::kGptOss, "gpt-oss", "gpt-oss"},
    {Architecture::kLlama4, "llama4", "Llama 4"},
};

}  // namespace

Architecture parse_architecture(std::string_view name) {
  std::string s(name);
  for (char& c : s) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string known;
  for (const ArchName& a : kArchNames) {
    if (s == a.name) return a.arch;
    known += (known.empty() ? "" : ", ") + std::string(a.name);
  }
  throw std::invalid_argument("unknown architecture '" + std::string(name) + "' (expected one of: " + known +
                              ")");
}

std::string_view to_string(Architecture arch) {
  for (const ArchName& a : kArchNames) {
    if (a.arch == arch) return a.name;
  }
  return "?";
}

std::string_view display_name(Architecture arch) {
  for (const ArchName& a : kArchNames) {
    if (a.arch == arch) return a.display;
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

uint64_t LayerShape::expert_bytes(DType storage) const {
  // One matrix [rows, cols] in `storage`: whole blocks per row; FP8 adds an fp32 scale per 128 x 128 block.
  const auto matrix = [storage](int64_t rows, int64_t cols) {
    const int64_t be = kernels::block_elems(storage);
    uint64_t bytes = static_cast<uint64_t>(rows) * kernels::row_bytes(storage, (cols + be - 1) / be * be);
    if (storage == DType::kFP8) {
      const auto blocks = [](int64_t n) { return static_cast<uint64_t>((n + 127) / 128); };
      bytes += 4 * blocks(rows) * blocks(cols);
    }
    return bytes;
  };
  uint64_t n =
      static_cast<uint64_t>(num_experts) * (2 * matrix(expert_ff, hidden) + matrix(hidden, expert_ff));
  if (num_shared_experts > 0) n += 2 * matrix(shared_ff, hidden) + matrix(hidden, shared_ff);
  return n;
}

void LayerShape::validate_for(Architecture arch) const {
  validate();
  const std::string who = std::string(to_string(arch)) + " layers ";
  auto fail = [&](const std::string& what) { throw std::invalid_argument("LayerShape: " + who + what); };
  const bool gpt_oss = arch == Architecture::kGptOss;
  if (router_bias != gpt_oss) fail(gpt_oss ? "carry a router bias (set router_bias)" : "have no router bias");
  if (expert_bias != gpt_oss)
    fail(gpt_oss ? "carry expert biases (set expert_bias)" : "have no expert biases");
  switch (arch) {
    case Architecture::kMixtral:
    case Architecture::kOlmoe:
    case Architecture::kQwen3Moe:
    case Architecture::kGptOss:
      if (num_shared_experts != 0) fail("have no shared expert (num_shared_experts must be 0)");
      if (score_bias) fail("have no score bias");
      break;
    case Architecture::kQwen2Moe:
      if (num_shared_experts > 1) fail("have at most one shared expert");
      if (score_bias) fail("have no score bias");
      break;
    case Architecture::kDeepseekV2:
      if (shared_expert_gate) fail("have no shared_expert_gate");
      if (score_bias) fail("have no score bias (DeepSeek-V2 routes without e_score_correction_bias)");
      break;
    case Architecture::kDeepseekV3:
    case Architecture::kGlm4Moe:
      if (shared_expert_gate) fail("have no shared_expert_gate");
      if (!score_bias) fail("carry e_score_correction_bias (set score_bias)");
      break;
    case Architecture::kLlama4:
      if (num_shared_experts != 1) fail("have one shared expert (num_shared_experts must be 1)");
      if (shared_expert_gate) fail("have no shared_expert_gate");
      if (score_bias) fail("have no score bias");
      break;
  }
}

// Builds a LayerWeights: the friend of LayerWeights that owns the private members' filling.
class LayerBuilder {
 public:
  // `storage`: f32, bf16 or a quantized type (kF16 is refused: it is a file dtype only).
  LayerBuilder(const LayerShape& shape, DType storage) {
    if (storage == DType::kF16) {
      throw std::invalid_argument("moe::io: storage dtype must be f32, bf16 or a quantized type, not f16");
    }
    w_.shape_ = shape;
    w_.storage_ = storage;
  }

  // The weights, their storage() set to the routed experts' gate type when that is quantized.
  LayerWeights& weights() {
    for (const ExpertTensors& t : w_.experts_) {
      if (t.gate_proj.data == nullptr) continue;  // an expert a part does not hold
      if (kernels::is_quantized(t.gate_proj.dtype)) w_.storage_ = t.gate_proj.dtype;
      break;
    }
    return w_;
  }

  // An owned, zero-initialised buffer of `bytes` bytes that lives as long as the LayerWeights.
  std::byte* alloc(size_t bytes) {
    w_.owned_.emplace_back(bytes);
    return w_.owned_.back().data();
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
    if (kernels::is_quantized(to)) {
      return converted(MatrixView{values.data(), DType::kF32, rows, cols, cols}, to, canonical);
    }
    return owned_matrix(reinterpret_cast<const std::byte*>(values.data()), DType::kF32, rows, cols, to);
  }

  // An owned copy of `v` (host memory, validated) in type `to` (kernels/quant_formats.h):
  //   the same type        the rows' bytes (and FP8's scales) copied
  //   plain -> plain       converted (f32 -> bf16 rounds to nearest even; the rest is exact)
  //   quantized -> plain   each element's exact value rounded once
  //   plain -> quantized   quantized from the fp32 values (quantize_row; FP8: quantize_fp8, 128 x 128 blocks)
  // Throws std::invalid_argument naming `name` for quantized -> another quantized type, a shape the format
  // does not divide, or a value that is NaN or beyond `to`'s range.
  MatrixView converted(const MatrixView& v, DType to, const std::string& name) {
    const int64_t rows = v.rows, cols = v.cols;
    const std::string from_s(kernels::to_string(v.dtype)), to_s(kernels::to_string(to));
    auto fail = [&](const std::string& what) { throw std::invalid_argument(name + ": " + what); };
    if (kernels::is_quantized(to) && cols % kernels::block_elems(to) != 0) {
      fail("[" + std::to_string(rows) + ", " + std::to_string(cols) + "] cannot be stored as " + to_s +
           " (rows of whole " + std::to_string(kernels::block_elems(to)) + "-element blocks)");
    }
    std::byte* dst = alloc(checked_bytes(rows, cols, to));
    MatrixView out{dst, to, rows, cols, cols};
    const size_t out_row = kernels::row_bytes(to, cols);
    if (v.dtype == to) {
      for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * out_row, kernels::view_row(v, r), out_row);
      if (to == DType::kFP8) {
        const int64_t sr = kernels::fp8_scale_rows(v), sc = kernels::fp8_scale_cols(v);
        auto* scales = reinterpret_cast<float*>(alloc(static_cast<size_t>(sr * sc) * sizeof(float)));
        for (int64_t i = 0; i < sr; ++i) std::copy_n(v.scales + i * v.scale_stride, sc, scales + i * sc);
        out.scales = scales;
        out.scale_stride = sc;
        out.scale_block_rows = v.scale_block_rows;
        out.scale_block_cols = v.scale_block_cols;
      }
      return out;
    }
    if (!kernels::is_quantized(v.dtype) && !kernels::is_quantized(to)) {
      for (int64_t r = 0; r < rows; ++r) {
        internal::convert(kernels::view_row(v, r), v.dtype, dst + r * out_row, to, static_cast<size_t>(cols));
      }
      return out;
    }
    if (kernels::is_quantized(v.dtype)) {
      if (kernels::is_quantized(to))
        fail(from_s + " cannot be stored as " + to_s + " (dequantize to f32 or bf16)");
      std::vector<double> exact(static_cast<size_t>(cols));
      const size_t es = kernels::dtype_size(to);
      for (int64_t r = 0; r < rows; ++r) {
        kernels::reference_row(v, r, exact.data());
        for (int64_t i = 0; i < cols; ++i) {
          if (!store_rounded(exact[static_cast<size_t>(i)], to,
                             dst + r * out_row + static_cast<size_t>(i) * es)) {
            fail("element [" + std::to_string(r) + ", " + std::to_string(i) + "] of the " + from_s +
                 " matrix is NaN or dequantizes beyond the range of " + to_s);
          }
        }
      }
      return out;
    }
    // plain -> quantized, from the fp32 values
    std::vector<float> values(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      internal::convert(kernels::view_row(v, r), v.dtype,
                        reinterpret_cast<std::byte*>(values.data() + r * cols), DType::kF32,
                        static_cast<size_t>(cols));
    }
    if (to == DType::kFP8) {
      constexpr int32_t kB = static_cast<int32_t>(kernels::kFp8PublishedBlock);
      const int64_t sr = (rows + kB - 1) / kB, sc = (cols + kB - 1) / kB;
      auto* scales = reinterpret_cast<float*>(alloc(static_cast<size_t>(sr * sc) * sizeof(float)));
      kernels::quantize_fp8(values.data(), rows, cols, kB, kB, reinterpret_cast<uint8_t*>(dst), scales);
      out.scales = scales;
      out.scale_stride = sc;
      out.scale_block_rows = kB;
      out.scale_block_cols = kB;
      return out;
    }
    for (int64_t r = 0; r < rows; ++r)
      kernels::quantize_row(to, values.data() + r * cols, cols, dst + r * out_row);
    return out;
  }

  // An owned fp32 copy of `values` that lives as long as the LayerWeights.
  std::span<const float> owned_floats(std::span<const float> values) {
    auto* dst = reinterpret_cast<float*>(alloc(values.size() * sizeof(float)));
    std::copy(values.begin(), values.end(), dst);
    return {dst, values.size()};
  }

  void set_router_gate(MatrixView v) { w_.router_gate_ = v; }
  void set_score_bias(std::vector<float> b) { w_.score_bias_ = std::move(b); }
  void set_router_bias(std::vector<float> b) { w_.router_bias_ = std::move(b); }
  void add_expert(ExpertTensors e) { w_.experts_.push_back(e); }
  void set_shared(ExpertTensors e) { w_.shared_ = e; }
  void set_shared_gate(MatrixView v) { w_.shared_gate_ = v; }
  void set_checkpoint(std::shared_ptr<const Checkpoint> c) { w_.checkpoint_ = std::move(c); }
  void set_keep_alive(std::shared_ptr<const void> owner) { w_.keep_alive_ = std::move(owner); }
  void set_held(ExpertSet held) { w_.held_ = std::move(held); }

  // A caller's matrix: borrowed as it is, or copied (and converted to `to`) row by row into an owned one.
  MatrixView caller_matrix(const MatrixView& v, DType to, Ownership ownership, const std::string& name) {
    if (ownership == Ownership::kBorrow) return v;
    return converted(v, to, name);
  }
  void mark_zero_copy() { w_.zero_copy_ = true; }

 private:
  LayerWeights w_;
};

namespace {

std::string shape_of(const std::vector<int64_t>& shape) {
  return shape_string(std::span<const int64_t>(shape.data(), shape.size()));
}

// Reads one layer's tensors from a checkpoint, in two passes with the same decisions: planning (no builder:
// counts the bytes the owned matrices will take) and loading (allocates and fills). Every tensor is found
// with exactly the shape the layer implies, or the error names it.
class LayerLoader {
 public:
  // keep_quantized: FP8 and MXFP4 matrices are held as stored (kFP8 views, kMXFP4 blocks) instead of being
  // dequantized to the matrix() / mxfp4() call's plain dtype.
  LayerLoader(const Checkpoint& ckpt, Architecture arch, Fp8BlockSize fp8, bool keep_quantized,
              LayerBuilder* builder)
      : ckpt_(ckpt), arch_(arch), fp8_(fp8), keep_quantized_(keep_quantized), b_(builder) {}

  uint64_t planned_bytes() const { return planned_; }
  bool has(const std::string& name) const { return ckpt_.contains(name); }

  // The tensor `name` of any dtype with exactly `shape`.
  RawTensor raw(const std::string& name, std::initializer_list<int64_t> shape) const {
    const std::optional<RawTensor> t = ckpt_.raw(name);
    if (!t) {
      throw std::invalid_argument(name + " missing from checkpoint " + ckpt_.path().string() + " (a " +
                                  std::string(display_name(arch_)) + " layer needs it)");
    }
    if (!std::equal(t->shape->begin(), t->shape->end(), shape.begin(), shape.end())) {
      throw std::invalid_argument(name + ": shape " + shape_of(*t->shape) + " but expected " +
                                  shape_string(std::span<const int64_t>(shape.begin(), shape.size())) +
                                  " (checkpoint " + ckpt_.path().string() + ")");
    }
    return *t;
  }
  // The tensor `name` of a plain dtype (F32, BF16, F16) with exactly `shape`.
  const TensorInfo& plain(const std::string& name, std::initializer_list<int64_t> shape) const {
    raw(name, shape);
    return *ckpt_.find(name);  // throws naming the dtype when it is not F32, BF16 or F16
  }

  // The storage dtype a file's matrix suggests: its own, F16 -> F32, quantized -> BF16.
  DType suggested_storage(const std::string& name) const {
    const std::optional<RawTensor> t = ckpt_.raw(name);
    if (!t) return DType::kF32;  // reported when the matrix is read
    if (*t->dtype == "F32" || *t->dtype == "F16") return DType::kF32;
    return DType::kBF16;
  }

  // An [rows, cols] matrix: a view into the checkpoint when dtype and alignment allow, else converted; an
  // F8_E4M3 matrix with its <name>_scale_inv block scales is kept as a kFP8 view (keep_quantized, an even
  // block width) or dequantized.
  MatrixView matrix(const std::string& name, int64_t rows, int64_t cols, DType to) {
    const std::optional<RawTensor> t = ckpt_.raw(name);
    if (t && *t->dtype == "F8_E4M3") {
      return keep_quantized_ && fp8_.cols % 2 == 0 ? fp8_view(name, rows, cols)
                                                   : fp8_matrix(name, rows, cols, to);
    }
    const TensorInfo& info = plain(name, {rows, cols});
    const bool aligned = reinterpret_cast<uintptr_t>(info.data) % kernels::dtype_size(info.dtype) == 0;
    if (info.dtype == to && aligned) {
      if (b_) b_->mark_zero_copy();
      return MatrixView{info.data, to, rows, cols, cols};
    }
    if (!b_) return plan(rows, cols, to);
    return b_->owned_matrix(info.data, info.dtype, rows, cols, to);
  }

  // A 1-D tensor [n] as fp32 values.
  std::vector<float> floats(const std::string& name, int64_t n) const {
    const TensorInfo& info = plain(name, {n});
    std::vector<float> v(static_cast<size_t>(n));
    internal::convert(info.data, info.dtype, reinterpret_cast<std::byte*>(v.data()), DType::kF32, v.size());
    return v;
  }
  // Row e of a 2-D tensor [E, n] as fp32 values.
  std::vector<float> floats_row(const std::string& name, int64_t num_rows, int64_t n, int64_t e) const {
    const TensorInfo& info = plain(name, {num_rows, n});
    std::vector<float> v(static_cast<size_t>(n));
    const size_t esize = kernels::dtype_size(info.dtype);
    internal::convert(info.data + static_cast<size_t>(e * n) * esize, info.dtype,
                      reinterpret_cast<std::byte*>(v.data()), DType::kF32, v.size());
    return v;
  }

  // Expert e's [rows, in] matrix out of a fused, transposed [E, in, out_total] tensor: row j is column
  // col_of(j) (gpt-oss and Llama 4 experts).
  template <class ColOf>
  MatrixView transposed(const std::string& name, int64_t num_experts, int64_t e, int64_t in,
                        int64_t out_total, int64_t rows, ColOf col_of, DType to) {
    const TensorInfo& info = plain(name, {num_experts, in, out_total});
    if (!b_) return plan(rows, in, to);
    std::byte* dst = b_->alloc(checked_bytes(rows, in, to));
    const size_t src_size = kernels::dtype_size(info.dtype), dst_size = kernels::dtype_size(to);
    const std::byte* base = info.data + static_cast<size_t>(e * in * out_total) * src_size;
    constexpr int64_t kTile = 64;  // rows of the source read per pass: its cache lines are reused across j
    for (int64_t i0 = 0; i0 < in; i0 += kTile) {
      const int64_t i1 = std::min(in, i0 + kTile);
      for (int64_t j = 0; j < rows; ++j) {
        const int64_t c = col_of(j);
        for (int64_t i = i0; i < i1; ++i) {
          const float v =
              internal::load_f32(base + static_cast<size_t>(i * out_total + c) * src_size, info.dtype);
          std::byte* out = dst + static_cast<size_t>(j * in + i) * dst_size;
          if (to == DType::kF32) {
            std::memcpy(out, &v, 4);
          } else {
            const uint16_t h = kernels::f32_to_bf16(v);
            std::memcpy(out, &h, 2);
          }
        }
      }
    }
    return MatrixView{dst, to, rows, in, in};
  }

  // Expert e's [rows, cols] matrix out of MXFP4 <base>_blocks [E, out_total, cols / 32, 16] and
  // <base>_scales [E, out_total, cols / 32]: row j is source row row_of(j) ([out, in] layout).
  template <class RowOf>
  MatrixView mxfp4(const std::string& base, int64_t num_experts, int64_t e, int64_t out_total, int64_t cols,
                   int64_t rows, RowOf row_of, DType to) {
    if (cols % 32 != 0) {
      throw std::invalid_argument(base + "_blocks: MXFP4 needs the input size (" + std::to_string(cols) +
                                  ") to be a multiple of 32");
    }
    const int64_t groups = cols / 32;
    const RawTensor blocks = raw(base + "_blocks", {num_experts, out_total, groups, 16});
    const RawTensor scales = raw(base + "_scales", {num_experts, out_total, groups});
    if (*blocks.dtype != "U8" || *scales.dtype != "U8") {
      throw std::invalid_argument(base + "_blocks / _scales: MXFP4 tensors are U8 (got " + *blocks.dtype +
                                  " / " + *scales.dtype + ") in " + ckpt_.path().string());
    }
    if (keep_quantized_) to = DType::kMXFP4;  // the same codes and scales as kMXFP4 blocks
    if (!b_) return plan(rows, cols, to);
    std::byte* dst = b_->alloc(checked_bytes(rows, cols, to));
    const auto* bl = reinterpret_cast<const uint8_t*>(blocks.data);
    const auto* sc = reinterpret_cast<const uint8_t*>(scales.data);
    const size_t row_bytes = kernels::row_bytes(to, cols);
    if (to == DType::kMXFP4) {
      for (int64_t j = 0; j < rows; ++j) {
        const int64_t r = e * out_total + row_of(j);
        mxfp4_row_to_blocks(bl + r * groups * 16, sc + r * groups, groups,
                            dst + static_cast<size_t>(j) * row_bytes,
                            base + " (expert " + std::to_string(e) + ")", row_of(j));
      }
      return MatrixView{dst, to, rows, cols, cols};
    }
    for (int64_t j = 0; j < rows; ++j) {
      const int64_t r = e * out_total + row_of(j);
      dequantize_mxfp4_row(bl + r * groups * 16, sc + r * groups, groups, to,
                           dst + static_cast<size_t>(j) * row_bytes,
                           base + " (expert " + std::to_string(e) + ")", row_of(j));
    }
    return MatrixView{dst, to, rows, cols, cols};
  }

 private:
  MatrixView plan(int64_t rows, int64_t cols, DType to) {
    planned_ += checked_bytes(rows, cols, to);
    return MatrixView{nullptr, to, rows, cols, cols};
  }

  // The FP8 tensor `name` [rows, cols] and its <name>_scale_inv block scales (F32 or BF16).
  struct Fp8Tensors {
    RawTensor q, scale;
    DType scale_dtype;
    int64_t scale_rows, scale_cols;
  };
  Fp8Tensors fp8_tensors(const std::string& name, int64_t rows, int64_t cols) const {
    if (fp8_.rows <= 0 || fp8_.cols <= 0)
      throw std::invalid_argument(name + ": FP8 block size must be positive");
    Fp8Tensors t{raw(name, {rows, cols}),
                 {},
                 DType::kF32,
                 (rows + fp8_.rows - 1) / fp8_.rows,
                 (cols + fp8_.cols - 1) / fp8_.cols};
    const std::string scale_name = name + "_scale_inv";
    t.scale = raw(scale_name, {t.scale_rows, t.scale_cols});
    if (*t.scale.dtype == "F32") {
      t.scale_dtype = DType::kF32;
    } else if (*t.scale.dtype == "BF16") {
      t.scale_dtype = DType::kBF16;
    } else {
      throw std::invalid_argument(scale_name + ": dtype " + *t.scale.dtype +
                                  " (FP8 block scales are F32 or BF16) in " + ckpt_.path().string());
    }
    return t;
  }

  // The FP8 matrix as stored: a zero-copy kFP8 view of the file's bytes, its scales viewed too when they are
  // aligned F32, else widened exactly into an owned fp32 copy. A NaN code or a non-finite scale is refused by
  // name (one pass over the bytes, which also brings the file's pages in for the kernels' packing).
  MatrixView fp8_view(const std::string& name, int64_t rows, int64_t cols) {
    const Fp8Tensors t = fp8_tensors(name, rows, cols);
    const size_t n = static_cast<size_t>(t.scale_rows * t.scale_cols);
    const bool view_scales =
        t.scale_dtype == DType::kF32 && reinterpret_cast<uintptr_t>(t.scale.data) % alignof(float) == 0;
    if (!b_) {
      if (!view_scales) planned_ += n * sizeof(float);
      return MatrixView{nullptr, DType::kFP8, rows, cols, cols};
    }
    const float* scales = reinterpret_cast<const float*>(t.scale.data);
    if (!view_scales) {
      auto* owned = reinterpret_cast<float*>(b_->alloc(n * sizeof(float)));
      internal::convert(t.scale.data, t.scale_dtype, reinterpret_cast<std::byte*>(owned), DType::kF32, n);
      scales = owned;
    }
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(scales[i])) {
        throw std::invalid_argument(
            name + ": weight_scale_inv[" + std::to_string(static_cast<int64_t>(i) / t.scale_cols) + ", " +
            std::to_string(static_cast<int64_t>(i) % t.scale_cols) + "] is not finite");
      }
    }
    const auto* q = reinterpret_cast<const uint8_t*>(t.q.data);
    for (int64_t i = 0; i < rows * cols; ++i) {
      if ((q[i] & 0x7f) == 0x7f) {
        throw std::invalid_argument(name + ": element [" + std::to_string(i / cols) + ", " +
                                    std::to_string(i % cols) + "] is the FP8 NaN code");
      }
    }
    b_->mark_zero_copy();
    return MatrixView{t.q.data,
                      DType::kFP8,
                      rows,
                      cols,
                      cols,
                      scales,
                      t.scale_cols,
                      static_cast<int32_t>(fp8_.rows),
                      static_cast<int32_t>(fp8_.cols)};
  }

  MatrixView fp8_matrix(const std::string& name, int64_t rows, int64_t cols, DType to) {
    const Fp8Tensors t = fp8_tensors(name, rows, cols);
    const RawTensor& q = t.q;
    const RawTensor& scale = t.scale;
    const DType scale_dtype = t.scale_dtype;
    if (!b_) return plan(rows, cols, to);
    std::byte* dst = b_->alloc(checked_bytes(rows, cols, to));
    dequantize_fp8(reinterpret_cast<const uint8_t*>(q.data), rows, cols, scale.data, scale_dtype, fp8_, to,
                   dst, name);
    return MatrixView{dst, to, rows, cols, cols};
  }

  const Checkpoint& ckpt_;
  Architecture arch_;
  Fp8BlockSize fp8_;
  bool keep_quantized_;
  LayerBuilder* b_;
  uint64_t planned_ = 0;
};

// The layer's tensors through `loader` into `b` (the builder is null while planning).
void read_layer(LayerLoader& loader, LayerBuilder* b, Architecture arch, const HfNames& names,
                const LayerShape& shape, DType storage, const ExpertSet& experts) {
  const int64_t d = shape.hidden, ff = shape.expert_ff, E = shape.num_experts;
  const MatrixView gate = loader.matrix(names.router_gate(), E, d, DType::kF32);
  std::vector<float> score_bias, router_bias;
  if (shape.score_bias) score_bias = loader.floats(names.score_bias(), E);
  if (shape.router_bias) router_bias = loader.floats(names.router_bias(), E);
  if (b) {
    b->set_router_gate(gate);
    if (shape.score_bias) b->set_score_bias(std::move(score_bias));
    if (shape.router_bias) b->set_router_bias(std::move(router_bias));
  }
  for (int e = 0; e < shape.num_experts; ++e) {
    ExpertTensors t;
    if (!experts.contains(e)) {  // a part: this expert is another rank's (null views)
      if (b) b->add_expert(t);
      continue;
    }
    if (!fused_experts(arch)) {
      t.gate_proj = loader.matrix(names.expert(e, Proj::kGate), ff, d, storage);
      t.up_proj = loader.matrix(names.expert(e, Proj::kUp), ff, d, storage);
      t.down_proj = loader.matrix(names.expert(e, Proj::kDown), d, ff, storage);
    } else {
      // gpt-oss interleaves gate and up (columns / rows 2j and 2j + 1); Llama 4 concatenates them.
      const bool interleaved = arch == Architecture::kGptOss;
      auto gate_col = [&](int64_t j) { return interleaved ? 2 * j : j; };
      auto up_col = [&](int64_t j) { return interleaved ? 2 * j + 1 : ff + j; };
      auto same = [](int64_t j) { return j; };
      const std::string gu = names.fused_gate_up(), dn = names.fused_down();
      if (arch == Architecture::kGptOss && !loader.has(gu)) {
        t.gate_proj = loader.mxfp4(gu, E, e, 2 * ff, d, ff, gate_col, storage);
        t.up_proj = loader.mxfp4(gu, E, e, 2 * ff, d, ff, up_col, storage);
        t.down_proj = loader.mxfp4(dn, E, e, d, ff, d, same, storage);
      } else {
        t.gate_proj = loader.transposed(gu, E, e, d, 2 * ff, ff, gate_col, storage);
        t.up_proj = loader.transposed(gu, E, e, d, 2 * ff, ff, up_col, storage);
        t.down_proj = loader.transposed(dn, E, e, ff, d, d, same, storage);
      }
      if (shape.expert_bias) {
        const std::vector<float> gu_bias = loader.floats_row(gu + "_bias", E, 2 * ff, e);
        const std::vector<float> dn_bias = loader.floats_row(dn + "_bias", E, d, e);
        if (b) {
          std::vector<float> g(static_cast<size_t>(ff)), u(static_cast<size_t>(ff));
          for (int64_t j = 0; j < ff; ++j) {
            g[static_cast<size_t>(j)] = gu_bias[static_cast<size_t>(gate_col(j))];
            u[static_cast<size_t>(j)] = gu_bias[static_cast<size_t>(up_col(j))];
          }
          t.gate_bias = b->owned_floats(g);
          t.up_bias = b->owned_floats(u);
          t.down_bias = b->owned_floats(dn_bias);
        }
      }
    }
    if (b) b->add_expert(t);
  }
  if (shape.num_shared_experts > 0) {
    const int64_t sff = shape.shared_ff;
    ExpertTensors t;
    t.gate_proj = loader.matrix(names.shared(Proj::kGate), sff, d, storage);
    t.up_proj = loader.matrix(names.shared(Proj::kUp), sff, d, storage);
    t.down_proj = loader.matrix(names.shared(Proj::kDown), d, sff, storage);
    if (b) b->set_shared(t);
  }
  if (shape.shared_expert_gate) {
    const MatrixView g = loader.matrix(names.shared_gate(), 1, d, DType::kF32);
    if (b) b->set_shared_gate(g);
  }
}

// Appends one tensor to `out`, copying only when the view is strided; an FP8 matrix adds its
// "<name>_scale_inv" F32 block scales. Other quantized types have no safetensors form.
void add_tensor(std::vector<TensorToWrite>& out, std::vector<std::vector<std::byte>>& scratch,
                std::string name, const MatrixView& v, std::vector<int64_t> shape) {
  if (kernels::is_quantized(v.dtype) && v.dtype != DType::kFP8) {
    throw std::invalid_argument(
        "save_layer: " + name + " is " + std::string(kernels::to_string(v.dtype)) +
        ", which has no safetensors form (GGUF holds it); dequantize to f32 or bf16 first");
  }
  if (v.dtype == DType::kFP8) {
    const int64_t sr = kernels::fp8_scale_rows(v), sc = kernels::fp8_scale_cols(v);
    auto& buf = scratch.emplace_back(static_cast<size_t>(sr * sc) * sizeof(float));
    for (int64_t i = 0; i < sr; ++i) {
      std::memcpy(buf.data() + static_cast<size_t>(i * sc) * sizeof(float), v.scales + i * v.scale_stride,
                  static_cast<size_t>(sc) * sizeof(float));
    }
    out.push_back(TensorToWrite{name + "_scale_inv", "F32", {sr, sc}, buf});
  }
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
  // A plain matrix as tensor() hashes it; a quantized one by the bytes of its rows' blocks, and for FP8 its
  // block size and fp32 scales after them.
  void matrix(std::string_view name, const MatrixView& v) {
    if (!kernels::is_quantized(v.dtype)) {
      tensor(name, v.dtype, {v.rows, v.cols}, v.data, v.rows, v.cols, v.row_stride);
      return;
    }
    str(name);
    str(kernels::to_string(v.dtype));
    u64(2);
    u64(static_cast<uint64_t>(v.rows));
    u64(static_cast<uint64_t>(v.cols));
    for (int64_t r = 0; r < v.rows; ++r) bytes(kernels::view_row(v, r), kernels::row_bytes(v.dtype, v.cols));
    if (v.dtype != DType::kFP8) return;
    u64(static_cast<uint64_t>(v.scale_block_rows));
    u64(static_cast<uint64_t>(v.scale_block_cols));
    const int64_t sr = kernels::fp8_scale_rows(v), sc = kernels::fp8_scale_cols(v);
    for (int64_t i = 0; i < sr; ++i)
      bytes(v.scales + i * v.scale_stride, static_cast<size_t>(sc) * sizeof(float));
  }
  uint64_t digest() const { return XXH3_64bits_digest(state); }

  XXH3_state_t* state;
};

}  // namespace

namespace {

// Every expert and shared matrix, in the order of matrix_types().
template <class F>
void for_each_expert_matrix(const std::vector<ExpertTensors>& experts,
                            const std::optional<ExpertTensors>& shared, F&& f) {
  for (const ExpertTensors& t : experts) {
    if (t.gate_proj.data == nullptr) continue;  // an expert a part does not hold
    f(t.gate_proj);
    f(t.up_proj);
    f(t.down_proj);
  }
  if (shared) {
    f(shared->gate_proj);
    f(shared->up_proj);
    f(shared->down_proj);
  }
}

void hash_floats(Hasher& h, std::string_view name, std::span<const float> v) {
  const auto n = static_cast<int64_t>(v.size());
  if (n > 0) h.tensor(name, DType::kF32, {n}, v.data(), 1, n, n);
}

void hash_expert(Hasher& h, int e, const ExpertTensors& t) {
  h.matrix(canonical_expert(e, Proj::kGate), t.gate_proj);
  h.matrix(canonical_expert(e, Proj::kUp), t.up_proj);
  h.matrix(canonical_expert(e, Proj::kDown), t.down_proj);
  hash_floats(h, canonical_expert(e, Proj::kGate) + ".bias", t.gate_bias);
  hash_floats(h, canonical_expert(e, Proj::kUp) + ".bias", t.up_bias);
  hash_floats(h, canonical_expert(e, Proj::kDown) + ".bias", t.down_bias);
}

void hash_shared(Hasher& h, const std::optional<ExpertTensors>& shared,
                 const std::optional<MatrixView>& shared_gate) {
  if (shared) {
    h.matrix(canonical_shared(Proj::kGate), shared->gate_proj);
    h.matrix(canonical_shared(Proj::kUp), shared->up_proj);
    h.matrix(canonical_shared(Proj::kDown), shared->down_proj);
  }
  if (shared_gate) h.matrix("shared_gate", *shared_gate);
}

}  // namespace

std::vector<DType> LayerWeights::matrix_types() const {
  std::vector<DType> types;
  for_each_expert_matrix(experts_, shared_, [&](const MatrixView& m) {
    if (std::find(types.begin(), types.end(), m.dtype) == types.end()) types.push_back(m.dtype);
  });
  return types;
}

bool LayerWeights::quantized() const {
  bool any = false;
  for_each_expert_matrix(experts_, shared_,
                         [&](const MatrixView& m) { any = any || kernels::is_quantized(m.dtype); });
  return any;
}

uint64_t LayerWeights::expert_matrix_bytes() const {
  uint64_t bytes = 0;
  for_each_expert_matrix(experts_, shared_, [&](const MatrixView& m) {
    bytes += static_cast<uint64_t>(m.rows) * kernels::row_bytes(m.dtype, m.cols);
    if (m.dtype == DType::kFP8) {
      bytes += static_cast<uint64_t>(kernels::fp8_scale_rows(m) * kernels::fp8_scale_cols(m)) * sizeof(float);
    }
  });
  return bytes;
}

uint64_t LayerWeights::content_hash() const {
  static_assert(std::endian::native == std::endian::little, "content_hash hashes little-endian bytes");
  Hasher h;
  h.str("moe.io.LayerWeights.v1");
  h.matrix("router_gate", router_gate_);
  hash_floats(h, "score_bias", score_bias_);
  hash_floats(h, "router_bias", router_bias_);
  for (size_t e = 0; e < experts_.size(); ++e) {
    if (holds_expert(static_cast<int>(e))) hash_expert(h, static_cast<int>(e), experts_[e]);
  }
  hash_shared(h, shared_, shared_gate_);
  if (!held_.is_all()) {  // a part: after everything a whole layer hashes, so whole layers hash as before
    h.str("part");
    h.u64(held_.list().size());
    for (int e : held_.list()) h.u64(static_cast<uint64_t>(e));
  }
  return h.digest();
}

uint64_t LayerWeights::replicated_hash() const {
  Hasher h;
  h.str("moe.io.LayerWeights.replicated.v1");
  h.matrix("router_gate", router_gate_);
  hash_floats(h, "score_bias", score_bias_);
  hash_floats(h, "router_bias", router_bias_);
  hash_shared(h, shared_, shared_gate_);
  return h.digest();
}

uint64_t LayerWeights::expert_hash(int e) const {
  if (e < 0 || e >= static_cast<int>(experts_.size()) || !holds_expert(e)) {
    throw std::invalid_argument("LayerWeights::expert_hash: these weights do not hold expert " +
                                std::to_string(e) + " (they hold " + held_.describe() + ")");
  }
  Hasher h;
  h.str("moe.io.LayerWeights.expert.v1");
  hash_expert(h, e, experts_[static_cast<size_t>(e)]);
  return h.digest();
}

void LayerWeights::require_all_experts(std::string_view who) const {
  if (held_.is_all()) return;
  throw std::invalid_argument(std::string(who) + " needs every expert's weights; these hold " +
                              std::to_string(held_.list().size()) + " of " +
                              std::to_string(shape_.num_experts) + " (experts " + held_.describe() +
                              ": a rank's part, for ExpertParallelLayer)");
}

uint64_t sharded_hash(uint64_t replicated_hash, std::span<const uint64_t> expert_hashes) {
  uint64_t h = hash_combine64(0x7368617264656468ull, replicated_hash);  // "sharded" + 'h'
  h = hash_combine64(h, expert_hashes.size());
  for (uint64_t x : expert_hashes) h = hash_combine64(h, x);
  return h;
}

ExpertSet ExpertSet::only(std::vector<int> experts) {
  std::sort(experts.begin(), experts.end());
  experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
  ExpertSet s;
  s.all_ = false;
  s.list_ = std::move(experts);
  return s;
}

bool ExpertSet::contains(int expert) const {
  return all_ || std::binary_search(list_.begin(), list_.end(), expert);
}

void ExpertSet::check(int num_experts) const {
  for (int e : list_) {
    if (e < 0 || e >= num_experts) {
      throw std::invalid_argument("moe::io: expert " + std::to_string(e) +
                                  " asked for, outside the layer's [0, " + std::to_string(num_experts) + ")");
    }
  }
}

std::string ExpertSet::describe() const {
  if (all_) return "all";
  if (list_.empty()) return "none";
  std::string out;
  for (size_t i = 0; i < list_.size();) {
    size_t j = i;
    while (j + 1 < list_.size() && list_[j + 1] == list_[j] + 1) ++j;
    out += (i ? ", " : "") + std::to_string(list_[i]);
    if (j > i) out += "-" + std::to_string(list_[j]);
    i = j + 1;
  }
  return out;
}

LayerPartReader file_part_reader(std::shared_ptr<const Checkpoint> checkpoint, Architecture arch,
                                 int layer_index, const LayerShape& expected, std::optional<DType> storage,
                                 Fp8BlockSize fp8_block) {
  return LayerPartReader([=](const ExpertSet& experts) {
    return load_layer(checkpoint, arch, layer_index, expected, storage, fp8_block, experts);
  });
}

LayerWeights load_layer(std::shared_ptr<const Checkpoint> checkpoint, Architecture arch, int layer_index,
                        const LayerShape& expected, std::optional<DType> storage, Fp8BlockSize fp8_block,
                        const ExpertSet& experts) {
  if (checkpoint == nullptr) throw std::invalid_argument("load_layer: null checkpoint");
  if (layer_index < 0)
    throw std::invalid_argument("load_layer: negative layer index " + std::to_string(layer_index));
  expected.validate_for(arch);
  experts.check(expected.num_experts);
  const Checkpoint& ckpt = *checkpoint;
  const HfNames names(arch, layer_index,
                      arch == Architecture::kLlama4 ? llama4_root(ckpt, layer_index) : "model.");
  LayerLoader probe(ckpt, arch, fp8_block, false, nullptr);
  probe.raw(names.router_gate(), {expected.num_experts, expected.hidden});  // the first name to report
  // The file's format of the routed experts: FP8, gpt-oss's MXFP4 (no fused plain tensor), or plain.
  const std::string first = fused_experts(arch) ? names.fused_gate_up() : names.expert(0, Proj::kGate);
  const std::optional<RawTensor> first_tensor = ckpt.raw(first);
  const bool mxfp4_file = arch == Architecture::kGptOss && !first_tensor;
  const bool fp8_file = first_tensor && *first_tensor->dtype == "F8_E4M3";
  const bool quantized_file = mxfp4_file || fp8_file;
  const DType file_quant = mxfp4_file ? DType::kMXFP4 : DType::kFP8;  // when quantized_file
  // The plain storage (of plain matrices, and of quantized ones that are dequantized), and whether the
  // quantized matrices are held as stored.
  bool keep_quantized = !storage.has_value();
  DType plain = DType::kBF16;
  if (storage && kernels::is_quantized(*storage)) {
    if (*storage != DType::kFP8 && *storage != DType::kMXFP4) {
      throw std::invalid_argument(
          "load_layer: storage " + std::string(kernels::to_string(*storage)) +
          " is a GGUF type; a safetensors checkpoint is held as stored (fp8, mxfp4) or "
          "as f32 / bf16");
    }
    if (!quantized_file || file_quant != *storage) {
      throw std::invalid_argument("load_layer: storage " + std::string(kernels::to_string(*storage)) +
                                  " but " + ckpt.path().string() + " stores " + first + " as " +
                                  (quantized_file
                                       ? std::string(kernels::to_string(file_quant))
                                       : (first_tensor ? *first_tensor->dtype : std::string("?"))) +
                                  " (a checkpoint is held in its own format, or dequantized to f32 / bf16)");
    }
    keep_quantized = true;
  } else if (storage) {
    plain = *storage;
  } else if (!quantized_file) {
    plain = probe.suggested_storage(first);
  }
  LayerBuilder b(expected, plain);  // rejects kF16 storage
  LayerLoader planner(ckpt, arch, fp8_block, keep_quantized, nullptr);
  read_layer(planner, nullptr, arch, names, expected, plain, experts);
  const std::string held = keep_quantized && quantized_file
                               ? std::string(kernels::to_string(file_quant)) + " (as stored)"
                               : std::string(kernels::to_string(plain));
  check_memory(planner.planned_bytes(), "layer " + std::to_string(layer_index) + " of " +
                                            ckpt.path().string() + " in " + held + " storage");
  b.set_checkpoint(checkpoint);
  b.set_held(experts);
  LayerLoader loader(ckpt, arch, fp8_block, keep_quantized, &b);
  read_layer(loader, &b, arch, names, expected, plain, experts);
  return std::move(b.weights());
}

namespace {

// Checks one caller view: set, [rows, cols], rows `row_stride` >= cols apart (a quantized one by
// kernels::validate_view), of dtype `dtype` unless nullopt.
void check_view(const std::string& name, const MatrixView& v, int64_t rows, int64_t cols,
                std::optional<DType> dtype) {
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
  if (dtype && v.dtype != *dtype) {
    fail("dtype " + std::string(kernels::to_string(v.dtype)) + " but " +
         std::string(kernels::to_string(*dtype)) + " is needed");
  }
  kernels::validate_view(v, "weights_from_views: " + name);
}

}  // namespace

LayerWeights weights_from_views(const LayerShape& shape, const LayerViews& views,
                                std::optional<DType> storage, Ownership ownership,
                                std::shared_ptr<const void> keep_alive) {
  shape.validate();
  if (storage == DType::kF16) {
    throw std::invalid_argument("moe::io: storage dtype must be f32, bf16 or a quantized type, not f16");
  }
  const bool copy = ownership == Ownership::kCopy;
  const int64_t d = shape.hidden, ff = shape.expert_ff, E = shape.num_experts;
  auto fail = [](const std::string& what) { throw std::invalid_argument("weights_from_views: " + what); };

  check_view("router_gate", views.router_gate, E, d, DType::kF32);
  if (shape.score_bias != !views.score_bias.empty()) {
    fail(shape.score_bias ? "score_bias is required (shape.score_bias is set)"
                          : "score_bias given but shape.score_bias is not set");
  }
  if (shape.score_bias && static_cast<int64_t>(views.score_bias.size()) != E) {
    fail("score_bias has " + std::to_string(views.score_bias.size()) + " values, the shape needs " +
         std::to_string(E));
  }
  auto check_vector = [&](const std::string& name, std::span<const float> v, bool wanted, int64_t n,
                          const char* flag) {
    if (wanted != !v.empty()) {
      fail(wanted ? name + " is required (shape." + flag + " is set)"
                  : name + " given but shape." + flag + " is not set");
    }
    if (wanted && static_cast<int64_t>(v.size()) != n) {
      fail(name + " has " + std::to_string(v.size()) + " values, the shape needs " + std::to_string(n));
    }
  };
  check_vector("router_bias", views.router_bias, shape.router_bias, E, "router_bias");
  views.part.check(static_cast<int>(E));
  const int64_t given = views.part.is_all() ? E : static_cast<int64_t>(views.part.list().size());
  if (static_cast<int64_t>(views.experts.size()) != given) {
    fail(std::to_string(views.experts.size()) + " experts given, " +
         (views.part.is_all()
              ? "the shape has " + std::to_string(E)
              : "the part lists " + std::to_string(given) + " (" + views.part.describe() + ")"));
  }
  // experts[i] is expert id_of(i).
  auto id_of = [&](int64_t i) {
    return views.part.is_all() ? i : int64_t{views.part.list()[static_cast<size_t>(i)]};
  };
  // Plain expert matrices share one dtype (any file dtype when copied, the storage dtype when borrowed);
  // quantized ones each keep their own type unless a storage type is asked for.
  std::optional<DType> plain_dtype;
  auto check_matrix = [&](const std::string& name, const MatrixView& v, int64_t rows, int64_t cols) {
    if (!kernels::is_quantized(v.dtype)) {
      if (v.dtype != DType::kF32 && v.dtype != DType::kBF16 && !(copy && v.dtype == DType::kF16)) {
        fail(name +
             ": expert matrices must be f32, bf16 or quantized (f16 only with Ownership::kCopy), not " +
             std::string(kernels::to_string(v.dtype)));
      }
      if (!plain_dtype) plain_dtype = v.dtype;
      check_view(name, v, rows, cols, plain_dtype);
    } else {
      check_view(name, v, rows, cols, std::nullopt);
    }
    if (!copy && storage) check_view(name, v, rows, cols, storage);
    if (copy && storage && kernels::is_quantized(v.dtype) && kernels::is_quantized(*storage) &&
        v.dtype != *storage) {
      fail(name + ": a " + std::string(kernels::to_string(v.dtype)) + " matrix cannot be stored as " +
           std::string(kernels::to_string(*storage)) + " (dequantize to f32 or bf16)");
    }
  };
  auto check_ffn = [&](const std::string& name, const ExpertTensors& t, int64_t f) {
    check_matrix(name + ".gate_proj", t.gate_proj, f, d);
    check_matrix(name + ".up_proj", t.up_proj, f, d);
    check_matrix(name + ".down_proj", t.down_proj, d, f);
  };
  for (int64_t e = 0; e < given; ++e) {
    const std::string name = "experts[" + std::to_string(id_of(e)) + "]";
    check_ffn(name, views.experts[e], ff);
    check_vector(name + ".gate_bias", views.experts[e].gate_bias, shape.expert_bias, ff, "expert_bias");
    check_vector(name + ".up_bias", views.experts[e].up_bias, shape.expert_bias, ff, "expert_bias");
    check_vector(name + ".down_bias", views.experts[e].down_bias, shape.expert_bias, d, "expert_bias");
  }
  if ((shape.num_shared_experts > 0) != views.shared.has_value()) {
    fail(shape.num_shared_experts > 0 ? "the shape has a shared expert but no shared views were given"
                                      : "shared expert views given but shape.num_shared_experts is 0");
  }
  if (views.shared) check_ffn("shared", *views.shared, shape.shared_ff);
  if (shape.shared_expert_gate != views.shared_gate.has_value()) {
    fail(shape.shared_expert_gate ? "shared_gate is required (shape.shared_expert_gate is set)"
                                  : "shared_gate given but shape.shared_expert_gate is not set");
  }
  if (views.shared_gate) check_view("shared_gate", *views.shared_gate, 1, d, DType::kF32);

  // Everything checked: build. A matrix's storage: `storage` if given, else its own type (f16 -> f32).
  const DType plain = plain_dtype == DType::kF16 ? DType::kF32 : plain_dtype.value_or(DType::kF32);
  LayerBuilder b(shape, storage ? *storage : plain);
  const auto target = [&](const MatrixView& v) {
    if (storage) return *storage;
    return v.dtype == DType::kF16 ? DType::kF32 : v.dtype;
  };
  b.set_keep_alive(std::move(keep_alive));
  if (views.mapped && !copy) b.mark_zero_copy();
  b.set_router_gate(b.caller_matrix(views.router_gate, DType::kF32, ownership, "router_gate"));
  if (shape.score_bias)
    b.set_score_bias(std::vector<float>(views.score_bias.begin(), views.score_bias.end()));
  if (shape.router_bias)
    b.set_router_bias(std::vector<float>(views.router_bias.begin(), views.router_bias.end()));
  auto ffn = [&](const std::string& name, const ExpertTensors& t) {
    ExpertTensors out{b.caller_matrix(t.gate_proj, target(t.gate_proj), ownership, name + ".gate_proj"),
                      b.caller_matrix(t.up_proj, target(t.up_proj), ownership, name + ".up_proj"),
                      b.caller_matrix(t.down_proj, target(t.down_proj), ownership, name + ".down_proj")};
    if (!t.gate_bias.empty()) {
      out.gate_bias = b.owned_floats(t.gate_bias);
      out.up_bias = b.owned_floats(t.up_bias);
      out.down_bias = b.owned_floats(t.down_bias);
    }
    return out;
  };
  b.set_held(views.part);
  for (int64_t e = 0, i = 0; e < E; ++e) {
    if (i < given && id_of(i) == e) {
      b.add_expert(ffn("experts[" + std::to_string(e) + "]", views.experts[static_cast<size_t>(i++)]));
    } else {
      b.add_expert(ExpertTensors{});  // another rank's expert
    }
  }
  if (views.shared) b.set_shared(ffn("shared", *views.shared));
  if (views.shared_gate) {
    b.set_shared_gate(b.caller_matrix(*views.shared_gate, DType::kF32, ownership, "shared_gate"));
  }
  return std::move(b.weights());
}

LayerWeights random_layer(const LayerShape& shape, DType storage, uint64_t seed, const ExpertSet& experts) {
  shape.validate();
  experts.check(shape.num_experts);
  LayerBuilder b(shape, storage);
  b.set_held(experts);
  const int64_t d = shape.hidden, ff = shape.expert_ff;
  b.set_router_gate(b.random_matrix("router_gate", shape.num_experts, d, DType::kF32, seed));
  if (shape.score_bias) {
    std::vector<float> bias(static_cast<size_t>(shape.num_experts));
    SplitMix64 rng(stream_seed(seed, "score_bias"));
    for (float& v : bias) v = uniform_in(rng, 0.05);
    b.set_score_bias(std::move(bias));
  }
  auto random_vector = [&](const std::string& canonical, int64_t n, double bound) {
    std::vector<float> v(static_cast<size_t>(n));
    SplitMix64 rng(stream_seed(seed, canonical));
    for (float& x : v) x = uniform_in(rng, bound);
    return v;
  };
  if (shape.router_bias) b.set_router_bias(random_vector("router_bias", shape.num_experts, 0.5));
  for (int e = 0; e < shape.num_experts; ++e) {
    if (!experts.contains(e)) {
      b.add_expert(ExpertTensors{});
      continue;
    }
    ExpertTensors t{b.random_matrix(canonical_expert(e, Proj::kGate), ff, d, storage, seed),
                    b.random_matrix(canonical_expert(e, Proj::kUp), ff, d, storage, seed),
                    b.random_matrix(canonical_expert(e, Proj::kDown), d, ff, storage, seed)};
    if (shape.expert_bias) {
      const double in_bound = 1.0 / std::sqrt(static_cast<double>(d)),
                   ff_bound = 1.0 / std::sqrt(static_cast<double>(ff));
      t.gate_bias = b.owned_floats(random_vector(canonical_expert(e, Proj::kGate) + ".bias", ff, in_bound));
      t.up_bias = b.owned_floats(random_vector(canonical_expert(e, Proj::kUp) + ".bias", ff, in_bound));
      t.down_bias = b.owned_floats(random_vector(canonical_expert(e, Proj::kDown) + ".bias", d, ff_bound));
    }
    b.add_expert(t);
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

namespace {

// The bytes of element (r, c) of a view.
const std::byte* element(const MatrixView& v, int64_t r, int64_t c) {
  return static_cast<const std::byte*>(v.data) +
         static_cast<size_t>(r * v.row_stride + c) * kernels::dtype_size(v.dtype);
}

// A float vector as an F32 tensor (the span stays valid as long as its owner).
TensorToWrite vector_tensor(std::string name, std::span<const float> v, std::vector<int64_t> shape) {
  return TensorToWrite{std::move(name), "F32", std::move(shape), std::as_bytes(v)};
}

// The fused, transposed expert tensors of gpt-oss and Llama 4 ([E, d, 2 ff] gate_up, [E, ff, d] down, and
// for gpt-oss their biases [E, 2 ff], [E, d]), laid out anew in `scratch`.
void add_fused_experts(std::vector<TensorToWrite>& out, std::vector<std::vector<std::byte>>& scratch,
                       const LayerWeights& w, Architecture arch, const HfNames& names) {
  const LayerShape& s = w.shape();
  const int64_t E = s.num_experts, d = s.hidden, ff = s.expert_ff;
  if (w.quantized()) {
    throw std::invalid_argument("save_layer: " + std::string(display_name(arch)) +
                                " layers are saved with fused plain expert tensors; this layer holds " +
                                std::string(kernels::to_string(w.storage())) +
                                " matrices (dequantize first)");
  }
  const size_t es = kernels::dtype_size(w.storage());
  const bool interleaved = arch == Architecture::kGptOss;
  // Filled here, then moved into `scratch` (moving keeps each buffer's heap storage, which the spans name).
  std::vector<std::byte> gu(static_cast<size_t>(E * d * 2 * ff) * es),
      dn(static_cast<size_t>(E * ff * d) * es);
  for (int64_t e = 0; e < E; ++e) {
    const ExpertTensors& t = w.experts()[static_cast<size_t>(e)];
    for (int64_t j = 0; j < ff; ++j) {
      const int64_t gate_col = interleaved ? 2 * j : j, up_col = interleaved ? 2 * j + 1 : ff + j;
      for (int64_t i = 0; i < d; ++i) {
        std::byte* row = gu.data() + static_cast<size_t>((e * d + i) * 2 * ff) * es;
        std::memcpy(row + static_cast<size_t>(gate_col) * es, element(t.gate_proj, j, i), es);
        std::memcpy(row + static_cast<size_t>(up_col) * es, element(t.up_proj, j, i), es);
        std::memcpy(dn.data() + static_cast<size_t>((e * ff + j) * d + i) * es, element(t.down_proj, i, j),
                    es);
      }
    }
  }
  const std::string dtype(safetensors_dtype_name(w.storage()));
  out.push_back(
      TensorToWrite{names.fused_gate_up(), dtype, {E, d, 2 * ff}, scratch.emplace_back(std::move(gu))});
  out.push_back(TensorToWrite{names.fused_down(), dtype, {E, ff, d}, scratch.emplace_back(std::move(dn))});
  if (!s.expert_bias) return;
  std::vector<std::byte> gub(static_cast<size_t>(E * 2 * ff) * sizeof(float)),
      dnb(static_cast<size_t>(E * d) * sizeof(float));
  auto* gub_f = reinterpret_cast<float*>(gub.data());
  auto* dnb_f = reinterpret_cast<float*>(dnb.data());
  for (int64_t e = 0; e < E; ++e) {
    const ExpertTensors& t = w.experts()[static_cast<size_t>(e)];
    for (int64_t j = 0; j < ff; ++j) {
      gub_f[e * 2 * ff + (interleaved ? 2 * j : j)] = t.gate_bias[static_cast<size_t>(j)];
      gub_f[e * 2 * ff + (interleaved ? 2 * j + 1 : ff + j)] = t.up_bias[static_cast<size_t>(j)];
    }
    std::copy(t.down_bias.begin(), t.down_bias.end(), dnb_f + e * d);
  }
  out.push_back(TensorToWrite{
      names.fused_gate_up() + "_bias", "F32", {E, 2 * ff}, scratch.emplace_back(std::move(gub))});
  out.push_back(
      TensorToWrite{names.fused_down() + "_bias", "F32", {E, d}, scratch.emplace_back(std::move(dnb))});
}

}  // namespace

std::vector<TensorToWrite> layer_tensors(const LayerWeights& weights, Architecture arch, int layer_index,
                                         std::vector<std::vector<std::byte>>& scratch) {
  if (layer_index < 0)
    throw std::invalid_argument("save_layer: negative layer index " + std::to_string(layer_index));
  weights.require_all_experts("save_layer");
  const LayerShape& shape = weights.shape();
  shape.validate_for(arch);
  const HfNames names(arch, layer_index, arch == Architecture::kLlama4 ? "language_model.model." : "model.");
  std::vector<TensorToWrite> tensors;
  // Spans point at each scratch buffer's heap storage, which stays put when `scratch` itself grows.
  const MatrixView& gate = weights.router_gate();
  add_tensor(tensors, scratch, names.router_gate(), gate, {gate.rows, gate.cols});
  if (shape.score_bias) {
    tensors.push_back(vector_tensor(names.score_bias(), weights.score_bias(), {shape.num_experts}));
  }
  if (shape.router_bias) {
    tensors.push_back(vector_tensor(names.router_bias(), weights.router_bias(), {shape.num_experts}));
  }
  const auto experts = weights.experts();
  if (fused_experts(arch)) {
    add_fused_experts(tensors, scratch, weights, arch, names);
  } else {
    for (size_t e = 0; e < experts.size(); ++e) {
      const int ei = static_cast<int>(e);
      for (Proj p : kProjs) {
        const MatrixView& v = p == Proj::kGate ? experts[e].gate_proj
                              : p == Proj::kUp ? experts[e].up_proj
                                               : experts[e].down_proj;
        add_tensor(tensors, scratch, names.expert(ei, p), v, {v.rows, v.cols});
      }
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
  return tensors;
}

void save_layer(const LayerWeights& weights, Architecture arch, int layer_index,
                const std::filesystem::path& path) {
  std::vector<std::vector<std::byte>> scratch;
  const std::vector<TensorToWrite> tensors = layer_tensors(weights, arch, layer_index, scratch);
  write_safetensors(path, tensors, {{"format", "pt"}, {"moe.architecture", std::string(to_string(arch))}});
}

}  // namespace moe::io
