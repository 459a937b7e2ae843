// The weights of one MoE layer: loading from Hugging Face checkpoints, from caller memory, seeded random
// init, saving, hashing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/tensor.h"
#include "kernels/weight_buffer.h"
#include "moe/io/checkpoint.h"
#include "moe/io/quantized.h"
#include "moe/io/safetensors.h"

namespace moe::io {

// Checkpoint families. Each decides the Hugging Face tensor names and layout of a layer (see load_layer) and,
// in moe/layer, its router and expert semantics (MoELayerConfig::preset).
enum class Architecture {
  kMixtral,
  kQwen2Moe,
  kDeepseekV3,  // also Kimi K2 (model_type deepseek_v3)
  kOlmoe,
  kQwen3Moe,
  kDeepseekV2,
  kGlm4Moe,  // GLM-4.5
  kGptOss,
  kLlama4,
};

// "mixtral", "qwen2-moe", "deepseek-v3", "olmoe", "qwen3-moe", "deepseek-v2", "glm4-moe", "gpt-oss",
// "llama4". parse_architecture also accepts "_" for "-" and any case; anything else throws
// std::invalid_argument listing the valid names.
Architecture parse_architecture(std::string_view name);
std::string_view to_string(Architecture arch);
// "Mixtral", "Qwen2-MoE", "DeepSeek-V3", ..., "gpt-oss", "Llama 4": for messages.
std::string_view display_name(Architecture arch);

// The dimensions of one MoE layer.
//   hidden              d_model (in_features of gate/up, out_features of down)
//   expert_ff           intermediate size of each routed expert (Mixtral intermediate_size, Qwen2-MoE
//                       moe_intermediate_size, DeepSeek-V3 moe_intermediate_size, OLMoE intermediate_size)
//   num_experts         E, routed experts
//   num_shared_experts  0: no shared expert. Qwen2-MoE: 1 (one shared MLP of shared_ff =
//                       shared_expert_intermediate_size). DeepSeek-V3: n_shared_experts, fused in the
//                       checkpoint into one MLP of shared_ff = moe_intermediate_size * n_shared_experts.
//   shared_ff           intermediate size of the (fused) shared MLP; ignored when num_shared_experts == 0
//   shared_expert_gate  Qwen2-MoE: the shared MLP's output is scaled by sigmoid(shared_gate . x), shared_gate
//                       [1, hidden]. Requires a shared expert.
//   score_bias          the layer has a per-expert selection bias (DeepSeek-V3 e_score_correction_bias [E]).
//                       Required (true) for DeepSeek-V3 and GLM-4.5, not allowed for the other architectures.
//   router_bias         the router gate has a bias [E] added to its logits (gpt-oss router.bias). Required
//   for
//                       gpt-oss, not allowed for the others.
//   expert_bias         every routed expert has fp32 biases: gate [expert_ff], up [expert_ff], down [hidden]
//                       (gpt-oss gate_up_proj_bias, down_proj_bias). Required for gpt-oss, not allowed for
//                       the others.
struct LayerShape {
  int64_t hidden = 0;
  int64_t expert_ff = 0;
  int num_experts = 0;
  int num_shared_experts = 0;
  int64_t shared_ff = 0;
  bool shared_expert_gate = false;
  bool score_bias = false;
  bool router_bias = false;
  bool expert_bias = false;

  // Throws std::invalid_argument naming the offending field, e.g. "LayerShape: hidden (0) must be positive".
  void validate() const;
  // validate(), plus the rules of `arch` above (e.g. "mixtral layers have no shared expert").
  void validate_for(Architecture arch) const;

  bool operator==(const LayerShape&) const = default;

  // Bytes of the expert matrices (routed and shared) in `storage` (any type: for the block types whole
  // blocks per row, for kFP8 a byte per element plus an fp32 scale per 128 x 128 block): what a layer holds
  // when its weights are converted, dequantized or quantized (zero-copy views of a file take none).
  uint64_t expert_bytes(kernels::DType storage) const;
};

// The routed experts a load covers, or a LayerWeights holds: every one (a whole layer), or a list (a rank's
// part under expert parallelism: "load these experts of layer i"; the router gate, its biases and the shared
// expert always come along). A list may be empty (a rank that only routes, combines and runs the shared
// expert). Any reader of a checkpoint serves such a request (LayerPartReader below).
class ExpertSet {
 public:
  static ExpertSet all() { return ExpertSet(); }
  // Sorted and deduplicated; its values are checked against the layer's expert count where it is used
  // (std::invalid_argument naming the expert).
  static ExpertSet only(std::vector<int> experts);
  bool is_all() const { return all_; }
  // The listed experts, ascending (empty for all()).
  const std::vector<int>& list() const { return list_; }
  bool contains(int expert) const;
  // Throws std::invalid_argument when an expert is outside [0, num_experts).
  void check(int num_experts) const;
  // "all" or "0-3, 7" (ranges where contiguous), "none" for an empty list.
  std::string describe() const;

 private:
  bool all_ = true;
  std::vector<int> list_;
};

// The three matrices of one SwiGLU expert, nn.Linear layout [out, in]:
// gate_proj and up_proj [ff, hidden], down_proj [hidden, ff]. Each is f32, bf16 or one of the quantized
// formats (kernels/quant_formats.h: Q8_0, Q4_K, Q6_K, MXFP4 blocks or FP8 with its block scales in the view);
// plain matrices have the layer's storage dtype, quantized ones the type they were stored in (a GGUF Q4_K_M
// layer mixes Q4_K and Q6_K projections). The biases (LayerShape::expert_bias) are fp32, empty when the layer
// has none.
struct ExpertTensors {
  kernels::MatrixView gate_proj, up_proj, down_proj;
  std::span<const float> gate_bias = {}, up_bias = {}, down_bias = {};  // [ff], [ff], [hidden] or empty
};

// The weights of one MoE layer. The expert matrices are f32 or bf16 (one storage dtype for all of them), or
// quantized, kept as the checkpoint stores them (each matrix its own format: Q8_0, Q4_K, Q6_K, MXFP4, FP8);
// the router gate, the selection bias and the shared-expert gate are always fp32.
//
// Ownership: a LayerWeights owns everything its views point to - an owned buffer (converted, copied or random
// weights), the mapped checkpoint, or a caller's keep-alive handle - with one exception: weights_from_views
// with Ownership::kBorrow and no keep-alive point into memory the caller keeps alive. Views stay valid while
// the LayerWeights lives, including after it is moved (moving does not relocate the storage). Movable, not
// copyable. Thread safety: immutable once built; all const methods may be called concurrently.
class LayerWeights {
 public:
  LayerWeights() = default;
  LayerWeights(LayerWeights&&) noexcept = default;
  LayerWeights& operator=(LayerWeights&&) noexcept = default;
  LayerWeights(const LayerWeights&) = delete;
  LayerWeights& operator=(const LayerWeights&) = delete;

  const LayerShape& shape() const { return shape_; }
  // Storage type of the expert matrices: kF32 or kBF16 for plain layers (every expert and shared matrix);
  // for a quantized layer the type of the routed experts' gate projections (matrix_types() lists every
  // type the layer holds).
  kernels::DType storage() const { return storage_; }
  // The distinct types of the expert and shared matrices, in the order first met (experts' gate, up, down,
  // then the shared expert's): {q4_k, q6_k} for a GGUF Q4_K_M layer whose down projections are Q6_K.
  std::vector<kernels::DType> matrix_types() const;
  // Whether any expert or shared matrix is quantized.
  bool quantized() const;
  // Bytes of the expert and shared matrices as held (the data of each row, FP8 block scales included),
  // whether owned or viewed in a mapped file.
  uint64_t expert_matrix_bytes() const;

  // [num_experts, hidden], fp32.
  const kernels::MatrixView& router_gate() const { return router_gate_; }
  // num_experts fp32 values when shape().score_bias, else empty.
  std::span<const float> score_bias() const { return score_bias_; }
  // num_experts fp32 values added to the router logits when shape().router_bias, else empty.
  std::span<const float> router_bias() const { return router_bias_; }
  // num_experts entries, expert e at index e; an expert these weights do not hold (a part: holds_expert) has
  // null views.
  std::span<const ExpertTensors> experts() const { return experts_; }
  // Which routed experts these weights hold: all of them (a whole layer), or a part (load_layer,
  // random_layer or weights_from_views with an ExpertSet::only).
  const ExpertSet& held() const { return held_; }
  bool holds_expert(int e) const { return held_.contains(e); }
  bool holds_all_experts() const { return held_.is_all(); }
  // Throws std::invalid_argument when these weights are a part: "<who> needs every expert's weights; these
  // hold 4 of 16 (experts 0-3: a rank's part, for ExpertParallelLayer)".
  void require_all_experts(std::string_view who) const;
  // The (fused) shared expert: gate/up [shared_ff, hidden], down [hidden, shared_ff]; nullopt if none.
  const std::optional<ExpertTensors>& shared() const { return shared_; }
  // [1, hidden], fp32, when shape().shared_expert_gate; else nullopt.
  const std::optional<kernels::MatrixView>& shared_gate() const { return shared_gate_; }

  // True if at least one expert matrix points into the checkpoint's mapping (no copy was made): a
  // safetensors checkpoint's, or a file weights_from_views was told of (LayerViews::mapped).
  bool zero_copy() const { return zero_copy_; }

  // XXH3-64 over every tensor in a fixed order (router gate, score bias, router bias, experts 0..E-1
  // gate/up/down and their biases, shared gate/up/down, shared gate), each contributing a canonical
  // architecture-independent name, its dtype, its shape and its elements' bytes row by row (the biases only
  // when the layer has them, so the hashes of layers without are those of earlier versions). A quantized
  // matrix contributes its type, shape and the bytes of its blocks row by row (kernels/quant_formats.h's
  // layouts), and for FP8 also its block size and its fp32 scales: the same quantized weights from a GGUF
  // file, a safetensors checkpoint (gpt-oss MXFP4 is rearranged into the same blocks) or caller memory hash
  // alike. The same weights give the same hash whatever file or naming they came from; any changed bit,
  // dtype or shape changes it. The weights hash of provenance fingerprints. A part hashes the experts it
  // holds (in the same order) and then the list of them, so that it never hashes like the whole layer.
  uint64_t content_hash() const;
  // Hashes of the pieces that expert parallelism places (XXH3-64 of canonical names, dtype, shape and bytes,
  // as content_hash): replicated_hash() covers what every rank holds (router gate, score and router bias,
  // shared expert and its gate), expert_hash(e) one routed expert's matrices and biases
  // (std::invalid_argument when these weights do not hold e). The same tensors hash the same in a part and in
  // the whole layer; sharded_hash() below combines them.
  uint64_t replicated_hash() const;
  uint64_t expert_hash(int e) const;

 private:
  friend class LayerBuilder;

  LayerShape shape_;
  kernels::DType storage_ = kernels::DType::kF32;
  std::shared_ptr<const void> keep_alive_;  // a borrower's owner (weights_from_views), or null
  ExpertSet held_;
  kernels::MatrixView router_gate_;
  std::vector<float> score_bias_;
  std::vector<float> router_bias_;
  std::vector<ExpertTensors> experts_;
  std::optional<ExpertTensors> shared_;
  std::optional<kernels::MatrixView> shared_gate_;
  bool zero_copy_ = false;
  std::shared_ptr<const Checkpoint> checkpoint_;
  std::vector<kernels::WeightBuffer> owned_;  // 2 MB pages where the system has them (weight_buffer.h)
};

// Loads layer `layer_index` of `checkpoint` with the Hugging Face names and layout of `arch` (P =
// model.layers.{i}.):
//   Mixtral      P block_sparse_moe.gate.weight [E, d]; P block_sparse_moe.experts.{e}.w1.weight (gate_proj)
//                [ff, d], .w3.weight (up) [ff, d], .w2.weight (down) [d, ff].
//   Qwen2-MoE    P mlp.gate.weight; P mlp.experts.{e}.{gate,up,down}_proj.weight;
//                P mlp.shared_expert.{gate,up,down}_proj.weight; P mlp.shared_expert_gate.weight [1, d].
//   Qwen3-MoE, OLMoE, DeepSeek-V2
//                P mlp.gate.weight; experts as Qwen2-MoE; DeepSeek-V2: P mlp.shared_experts.{...}.weight.
//   DeepSeek-V3, GLM-4.5
//                P mlp.gate.weight, P mlp.gate.e_score_correction_bias [E]; experts as Qwen2-MoE;
//                P mlp.shared_experts.{gate,up,down}_proj.weight.
//   gpt-oss      P mlp.router.weight [E, d], P mlp.router.bias [E]; the experts fused per layer, transposed
//                ([in, out]) with gate and up interleaved: P mlp.experts.gate_up_proj [E, d, 2 ff] (column
//                2j is gate row j, 2j + 1 up row j), P mlp.experts.gate_up_proj_bias [E, 2 ff],
//                P mlp.experts.down_proj [E, ff, d], P mlp.experts.down_proj_bias [E, d]; or MXFP4:
//                P mlp.experts.gate_up_proj_blocks [E, 2 ff, d / 32, 16] + _scales [E, 2 ff, d / 32] (row 2j
//                gate, 2j + 1 up, [out, in]) and down_proj_blocks [E, d, ff / 32, 16] + _scales.
//   Llama 4      R layers.{i}.feed_forward.router.weight [E, d]; R layers.{i}.feed_forward.experts.
//                gate_up_proj [E, d, 2 ff] (columns [0, ff) gate, [ff, 2 ff) up) and .down_proj [E, ff, d];
//                R layers.{i}.feed_forward.shared_expert.{gate,up,down}_proj.weight; R = model. (llama4_text)
//                or language_model.model. (the multimodal llama4 checkpoints), whichever the file has.
// Every tensor must exist with exactly the shape `expected` implies and a dtype of F32, BF16 or F16, or be
// quantized (moe/io/quantized.h): an F8_E4M3 matrix with its "<name>_scale_inv" block scales (`fp8_block`,
// config.json's weight_block_size), or gpt-oss's MXFP4 blocks and scales. Biases and gates are read as fp32.
//
// Storage: nullopt keeps the quantized matrices as stored - an FP8 matrix as a zero-copy kFP8 view of the
// file (its scales widened to an owned fp32 copy when the file has them in BF16), gpt-oss's MXFP4 rearranged
// into kMXFP4 blocks (the same bytes, kernels/quant_formats.h) - and the plain ones in the file's dtype of
// the first plain expert matrix (F16 becomes kF32), converting any expert matrix of another plain dtype; an
// FP8 block size with an odd number of columns has no kernel and is dequantized to bf16. `storage` = kF32 or
// kBF16 stores every expert matrix in that dtype (f32 -> bf16 rounds to nearest even; bf16/f16 -> f32 is
// exact; quantized values are exact products rounded once). `storage` = kFP8 or kMXFP4 asks for the
// checkpoint's own quantized format (an error naming both when the file holds another); the other quantized
// types are GGUF's and are refused here. A matrix whose file dtype equals the storage dtype and whose data is
// aligned to its element size is a zero-copy view into the checkpoint; fused tensors are always copied. Only
// this layer's tensors are read (pages of the mapped files are touched on use).
//
// Memory: the bytes the converted matrices will take are checked against the memory available
// (moe/io/memory.h) before anything is allocated: io::OutOfMemory names both.
//
// Errors (std::invalid_argument): a shape that does not fit `arch`; `storage` kF16; a missing tensor
// ("model.layers.3.mlp.experts.5.up_proj.weight missing from checkpoint /path (a Qwen2-MoE layer needs it)"),
// a wrong shape ("...: shape [1408, 2048] but expected [1408, 1024]"), an unsupported dtype, a quantized
// value that is NaN or beyond the storage dtype.
//
// Parts: `experts` = ExpertSet::only(list) reads the router gate, its biases, the shared expert and only the
// listed experts (the others' tensors are neither read nor looked up, and the memory check counts only what
// is read); the result holds() that list. A listed expert outside [0, E) is std::invalid_argument.
LayerWeights load_layer(std::shared_ptr<const Checkpoint> checkpoint, Architecture arch, int layer_index,
                        const LayerShape& expected, std::optional<kernels::DType> storage = std::nullopt,
                        Fp8BlockSize fp8_block = {}, const ExpertSet& experts = ExpertSet::all());

// The combination of a layer's piece hashes (LayerWeights::replicated_hash, expert_hash of every expert in
// order): what an expert-parallel layer's ranks agree on and report as the layer's weights hash, the same
// whether the ranks hold parts or the whole layer.
uint64_t sharded_hash(uint64_t replicated_hash, std::span<const uint64_t> expert_hashes);

// "Load these experts of layer i": what an expert-parallel layer calls on each rank with the experts that
// rank holds (moe/parallel/expert_parallel_layer.h). Any checkpoint reader provides one: a safetensors
// directory (pretrained_part_reader, moe/io/pretrained.h), one file (file_part_reader below).
class LayerPartReader {
 public:
  explicit LayerPartReader(std::function<LayerWeights(const ExpertSet& experts)> read)
      : read_(std::move(read)) {}
  LayerWeights operator()(const ExpertSet& experts) const { return read_(experts); }

 private:
  std::function<LayerWeights(const ExpertSet&)> read_;
};
// load_layer(checkpoint, arch, layer_index, expected, storage, fp8_block, experts) for the experts asked.
LayerPartReader file_part_reader(std::shared_ptr<const Checkpoint> checkpoint, Architecture arch,
                                 int layer_index, const LayerShape& expected,
                                 std::optional<kernels::DType> storage = std::nullopt,
                                 Fp8BlockSize fp8_block = {});

// One layer's tensors in caller memory (host), nn.Linear layout, any row stride >= cols:
//   router_gate  [num_experts, hidden], fp32
//   score_bias   num_experts fp32 values iff shape.score_bias, else empty
//   experts      num_experts entries: gate_proj, up_proj [expert_ff, hidden], down_proj [hidden, expert_ff]
//   shared       the (fused) shared expert iff shape.num_shared_experts > 0: [shared_ff, hidden] x 2,
//                [hidden, shared_ff]
//   shared_gate  [1, hidden], fp32, iff shape.shared_expert_gate
//   router_bias  num_experts fp32 values iff shape.router_bias
//   experts[e].{gate,up,down}_bias  fp32 [ff], [ff], [hidden] iff shape.expert_bias (always copied)
// Plain expert and shared matrices share one dtype, kF32 or kBF16 (kF16 views are accepted with kCopy and
// converted); quantized ones (kernels/quant_formats.h: each view of its own format, FP8 with its scales in
// the view) may be mixed with each other, e.g. a GGUF layer's Q4_K gate/up and Q6_K down projections.
// A part (expert parallelism: each rank passes only its experts): `part` = ExpertSet::only(list) and
// experts[i] is expert list()[i] (experts.size() == list().size()).
struct LayerViews {
  kernels::MatrixView router_gate;
  std::span<const float> score_bias;
  std::span<const float> router_bias;
  std::vector<ExpertTensors> experts;
  ExpertSet part = ExpertSet::all();
  std::optional<ExpertTensors> shared;
  std::optional<kernels::MatrixView> shared_gate;
  // With Ownership::kBorrow: some expert matrix points into a mapped checkpoint file that `keep_alive` holds
  // (a GGUF file's views), which LayerWeights::zero_copy() reports.
  bool mapped = false;
};

// What weights_from_views does with the caller's memory.
//   kCopy    copies (converting the expert matrices to `storage`) into buffers the LayerWeights owns; the
//            caller may free or change its memory as soon as the call returns.
//   kBorrow  keeps the caller's views, no copy: the memory must stay alive and unchanged while the weights
//            (and every layer built on them) live - `keep_alive` (if not null) is held until then, e.g. the
//            owner of the arrays (a mapped GGUF file). Each expert view's dtype must equal `storage`
//            (nullopt: any); the score bias is always copied.
enum class Ownership { kCopy, kBorrow };

// Weights from caller memory: no file is involved. Checks every view against `shape` (data set, dtype, rows,
// cols, row_stride >= cols; a quantized view by kernels::validate_view: whole blocks, FP8 scales) and throws
// std::invalid_argument naming the tensor ("experts[3].up_proj: [512, 256] but the shape needs [384, 256]")
// for a missing, superfluous or mis-shaped view, an invalid shape, or kF16 storage.
//   storage nullopt   every expert matrix stays in its own type (plain views must still share one dtype):
//                     what a loader of a quantized file (GGUF) passes, with kBorrow and its mapping as
//                     keep_alive, to hold the tensors as stored
//   kF32 / kBF16      plain views are converted (kCopy) or must already have it (kBorrow); quantized views
//                     are dequantized exactly, each element rounded once (kCopy only)
//   a quantized type  views of that type are kept (kBorrow) or copied (kCopy); f32/bf16 views are quantized
//                     with kernels::quantize_row / quantize_fp8 (128 x 128 blocks) (kCopy only)
// The result's content_hash equals that of the same values loaded from a file.
LayerWeights weights_from_views(const LayerShape& shape, const LayerViews& views,
                                std::optional<kernels::DType> storage, Ownership ownership,
                                std::shared_ptr<const void> keep_alive = nullptr);

// Seeded random weights, the same bits for the same (shape, storage, seed) on every machine and compiler.
// Each tensor draws from its own splitmix64 stream keyed by (seed, canonical tensor name), so adding experts
// leaves the existing ones unchanged. Values are uniform in [-1/sqrt(in), 1/sqrt(in)) like nn.Linear's
// default init (in = in_features: hidden for router gate, gate/up and shared gate, ff for down); the score
// bias, when shape.score_bias, is uniform in [-0.05, 0.05). Values are drawn in fp32 and rounded to
// bf16 (nearest even) for kBF16 storage, or quantized (kernels::quantize_row; FP8: quantize_fp8 with 128 x
// 128 blocks) for a quantized storage type, whose block size must divide the expert matrices' rows (256 for
// Q4_K / Q6_K, 32 for Q8_0 / MXFP4). Throws std::invalid_argument for an invalid shape, kF16 storage, or a
// shape the format does not divide.
// `experts`: a part with only those experts (each with the values it has in the whole layer of that seed).
LayerWeights random_layer(const LayerShape& shape, kernels::DType storage, uint64_t seed,
                          const ExpertSet& experts = ExpertSet::all());

// The tensors of `weights` as layer `layer_index` of `arch`, with the names and layout load_layer reads
// (expert matrices in the storage dtype - fused and transposed for gpt-oss and Llama 4, whose Llama 4 root is
// language_model.model. - router gate, biases and shared gate in F32; FP8 matrices as F8_E4M3 with their
// "<name>_scale_inv" F32 block scales, for the families with one matrix per expert). `scratch` keeps the
// bytes of tensors that had to be laid out anew; the result points into it and into `weights`. The other
// quantized types (GGUF's) have no safetensors form: std::invalid_argument names them.
std::vector<TensorToWrite> layer_tensors(const LayerWeights& weights, Architecture arch, int layer_index,
                                         std::vector<std::vector<std::byte>>& scratch);

// A part (holds_all_experts() false) is refused: std::invalid_argument.
// Writes layer_tensors(weights, arch, layer_index) into a safetensors file at `path`, so that
// load_layer(Checkpoint(path), arch, layer_index, weights.shape(), weights.storage()) gives back the same
// content_hash. Throws std::invalid_argument if the shape does not fit `arch`, io::IoError on I/O.
void save_layer(const LayerWeights& weights, Architecture arch, int layer_index,
                const std::filesystem::path& path);

}  // namespace moe::io
