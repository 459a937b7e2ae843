// The weights of one MoE layer: loading from Hugging Face checkpoints, from caller memory, seeded random
// init, saving, hashing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/tensor.h"
#include "moe/io/checkpoint.h"

namespace moe::io {

// Checkpoint naming families. Each decides the Hugging Face tensor names of a layer (see load_layer).
enum class Architecture { kMixtral, kQwen2Moe, kDeepseekV3, kOlmoe };

// "mixtral", "qwen2-moe", "deepseek-v3", "olmoe". parse_architecture also accepts "_" for "-" and any case;
// anything else throws std::invalid_argument listing the valid names.
Architecture parse_architecture(std::string_view name);
std::string_view to_string(Architecture arch);

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
//                       Required (true) for DeepSeek-V3, not allowed for the other architectures.
struct LayerShape {
  int64_t hidden = 0;
  int64_t expert_ff = 0;
  int num_experts = 0;
  int num_shared_experts = 0;
  int64_t shared_ff = 0;
  bool shared_expert_gate = false;
  bool score_bias = false;

  // Throws std::invalid_argument naming the offending field, e.g. "LayerShape: hidden (0) must be positive".
  void validate() const;
  // validate(), plus the rules of `arch` above (e.g. "mixtral layers have no shared expert").
  void validate_for(Architecture arch) const;

  bool operator==(const LayerShape&) const = default;
};

// The three matrices of one SwiGLU expert, nn.Linear layout [out, in]:
// gate_proj and up_proj [ff, hidden], down_proj [hidden, ff]. All three have the layer's storage dtype.
struct ExpertTensors {
  kernels::MatrixView gate_proj, up_proj, down_proj;
};

// The weights of one MoE layer, in one storage dtype (kF32 or kBF16) for the expert matrices; the router
// gate, the selection bias and the shared-expert gate are always fp32.
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
  // Storage dtype of the expert (and shared expert) matrices: kF32 or kBF16.
  kernels::DType storage() const { return storage_; }

  // [num_experts, hidden], fp32.
  const kernels::MatrixView& router_gate() const { return router_gate_; }
  // num_experts fp32 values when shape().score_bias, else empty.
  std::span<const float> score_bias() const { return score_bias_; }
  // num_experts entries, expert e at index e.
  std::span<const ExpertTensors> experts() const { return experts_; }
  // The (fused) shared expert: gate/up [shared_ff, hidden], down [hidden, shared_ff]; nullopt if none.
  const std::optional<ExpertTensors>& shared() const { return shared_; }
  // [1, hidden], fp32, when shape().shared_expert_gate; else nullopt.
  const std::optional<kernels::MatrixView>& shared_gate() const { return shared_gate_; }

  // True if at least one expert matrix points into the checkpoint's mapping (no copy was made).
  bool zero_copy() const { return checkpoint_ != nullptr && zero_copy_; }

  // XXH3-64 over every tensor in a fixed order (router gate, score bias, experts 0..E-1 gate/up/down, shared
  // gate/up/down, shared gate), each contributing a canonical architecture-independent name, its dtype, its
  // shape and its elements' bytes row by row. The same weights give the same hash whatever file or naming
  // they came from; any changed bit, dtype or shape changes it. The weights hash of provenance fingerprints.
  uint64_t content_hash() const;

 private:
  friend class LayerBuilder;

  LayerShape shape_;
  kernels::DType storage_ = kernels::DType::kF32;
  std::shared_ptr<const void> keep_alive_;  // a borrower's owner (weights_from_views), or null
  kernels::MatrixView router_gate_;
  std::vector<float> score_bias_;
  std::vector<ExpertTensors> experts_;
  std::optional<ExpertTensors> shared_;
  std::optional<kernels::MatrixView> shared_gate_;
  bool zero_copy_ = false;
  std::shared_ptr<const Checkpoint> checkpoint_;
  std::vector<std::unique_ptr<std::byte[]>> owned_;
};

// Loads layer `layer_index` of `checkpoint` with the Hugging Face names of `arch`:
//   Mixtral     model.layers.{i}.block_sparse_moe.gate.weight [E, d];
//               model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight (gate_proj) [ff, d], .w3.weight (up)
//               [ff, d], .w2.weight (down) [d, ff].
//   Qwen2-MoE   model.layers.{i}.mlp.gate.weight;
//   model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight;
//               model.layers.{i}.mlp.shared_expert.{gate,up,down}_proj.weight;
//               model.layers.{i}.mlp.shared_expert_gate.weight [1, d].
//   DeepSeek-V3 model.layers.{i}.mlp.gate.weight, model.layers.{i}.mlp.gate.e_score_correction_bias [E];
//               experts as Qwen2-MoE; model.layers.{i}.mlp.shared_experts.{gate,up,down}_proj.weight.
//   OLMoE       model.layers.{i}.mlp.gate.weight; experts as Qwen2-MoE; no shared expert.
// Every tensor must exist with exactly the shape `expected` implies and a dtype of F32, BF16 or F16.
//
// Storage: `storage` = kF32 or kBF16 stores the expert matrices in that dtype (f32 -> bf16 rounds to nearest
// even; bf16/f16 -> f32 is exact). nullopt keeps the file's dtype of the first expert's gate_proj (F16 files
// become kF32), converting any expert matrix of another dtype. A matrix whose file dtype equals the storage
// dtype and whose data is aligned to its element size is a zero-copy view into the checkpoint.
//
// Errors (std::invalid_argument): a shape that does not fit `arch`; `storage` kF16; a missing tensor
// ("model.layers.3.mlp.experts.5.up_proj.weight missing from checkpoint /path (a Qwen2-MoE layer needs it)"),
// a wrong shape ("...: shape [1408, 2048] but expected [1408, 1024]"), an unsupported dtype.
LayerWeights load_layer(std::shared_ptr<const Checkpoint> checkpoint, Architecture arch, int layer_index,
                        const LayerShape& expected, std::optional<kernels::DType> storage = std::nullopt);

// One layer's tensors in caller memory (host), nn.Linear layout, any row stride >= cols:
//   router_gate  [num_experts, hidden], fp32
//   score_bias   num_experts fp32 values iff shape.score_bias, else empty
//   experts      num_experts entries: gate_proj, up_proj [expert_ff, hidden], down_proj [hidden, expert_ff]
//   shared       the (fused) shared expert iff shape.num_shared_experts > 0: [shared_ff, hidden] x 2,
//                [hidden, shared_ff]
//   shared_gate  [1, hidden], fp32, iff shape.shared_expert_gate
// Every expert and shared matrix has the same dtype, kF32 or kBF16 (kF16 views are accepted with kCopy and
// converted).
struct LayerViews {
  kernels::MatrixView router_gate;
  std::span<const float> score_bias;
  std::vector<ExpertTensors> experts;
  std::optional<ExpertTensors> shared;
  std::optional<kernels::MatrixView> shared_gate;
};

// What weights_from_views does with the caller's memory.
//   kCopy    copies (converting the expert matrices to `storage`) into buffers the LayerWeights owns; the
//            caller may free or change its memory as soon as the call returns.
//   kBorrow  keeps the caller's views, no copy: the memory must stay alive and unchanged while the weights
//            (and every layer built on them) live - `keep_alive` (if not null) is held until then, e.g. the
//            owner of the arrays. The views' dtype must equal `storage`; the score bias is always copied.
enum class Ownership { kCopy, kBorrow };

// Weights from caller memory: no file is involved. Checks every view against `shape` (data set, dtype, rows,
// cols, row_stride >= cols) and throws std::invalid_argument naming the tensor ("experts[3].up_proj: [512,
// 256] but the shape needs [384, 256]") for a missing, superfluous or mis-shaped view, an invalid shape, or
// kF16 storage. The result's content_hash equals that of the same values loaded from a file.
LayerWeights weights_from_views(const LayerShape& shape, const LayerViews& views, kernels::DType storage,
                                Ownership ownership, std::shared_ptr<const void> keep_alive = nullptr);

// Seeded random weights, the same bits for the same (shape, storage, seed) on every machine and compiler.
// Each tensor draws from its own splitmix64 stream keyed by (seed, canonical tensor name), so adding experts
// leaves the existing ones unchanged. Values are uniform in [-1/sqrt(in), 1/sqrt(in)) like nn.Linear's
// default init (in = in_features: hidden for router gate, gate/up and shared gate, ff for down); the score
// bias, when shape.score_bias, is uniform in [-0.05, 0.05). Values are drawn in fp32 and rounded to
// bf16 (nearest even) for kBF16 storage. Throws std::invalid_argument for an invalid shape or kF16 storage.
LayerWeights random_layer(const LayerShape& shape, kernels::DType storage, uint64_t seed);

// Writes `weights` as layer `layer_index` of `arch` into a safetensors file at `path`, with the names
// load_layer reads (expert matrices in the storage dtype; router gate, bias and shared gate in F32), so that
// load_layer(Checkpoint(path), arch, layer_index, weights.shape(), weights.storage()) gives back the same
// content_hash. Throws std::invalid_argument if the shape does not fit `arch`, io::IoError on I/O.
void save_layer(const LayerWeights& weights, Architecture arch, int layer_index,
                const std::filesystem::path& path);

}  // namespace moe::io
