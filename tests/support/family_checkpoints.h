// Small checkpoint directories in each MoE family's exact published layout (config.json with the family's own
// keys, its tensor names, dtypes and shapes, dense layers where the family has them, FP8 block-scaled and
// MXFP4 expert weights where the family ships them, sharded through model.safetensors.index.json), written by
// the tests themselves (there is no model hub here), and the float64 weights of the MoE layer the tests use.
// The published rules each file follows are the families' transformers modeling and configuration files
// (read for their semantics; nothing here is copied from them).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "moe/io/layer_weights.h"
#include "moe/io/pretrained.h"
#include "moe/io/safetensors.h"

namespace moe::testing {

// One checkpoint the tests write: a model_type, the dtype of its plain tensors and its quantization.
struct FamilyCase {
  std::string name;                                  // gtest-safe: letters, digits, '_'
  std::string model_type;                            // config.json's
  kernels::DType dtype = kernels::DType::kBF16;      // F32 or BF16: the plain tensors' dtype in the file
  io::Quantization quant = io::Quantization::kNone;  // the expert matrices' format
  bool sharded = false;                              // model.safetensors.index.json over two shards
  bool kimi = false;  // deepseek_v3 in Kimi K2's configuration (one group, its scaling factor)
};

// Every model type, bf16 and f32, FP8 where the family ships it (DeepSeek-V3, Kimi K2, Qwen3, GLM-4.5) and
// MXFP4 for gpt-oss.
inline std::vector<FamilyCase> family_cases() {
  using io::Quantization;
  using kernels::DType;
  return {
      {"mixtral_bf16", "mixtral", DType::kBF16},
      {"mixtral_f32", "mixtral", DType::kF32},
      {"qwen2_moe_bf16", "qwen2_moe", DType::kBF16},
      {"qwen2_moe_f32", "qwen2_moe", DType::kF32, Quantization::kNone, true},
      {"qwen3_moe_bf16", "qwen3_moe", DType::kBF16},
      {"qwen3_moe_fp8", "qwen3_moe", DType::kBF16, Quantization::kFp8Block},
      {"olmoe_f32", "olmoe", DType::kF32},
      {"olmoe_bf16", "olmoe", DType::kBF16},
      {"deepseek_v2_bf16", "deepseek_v2", DType::kBF16},
      {"deepseek_v2_f32", "deepseek_v2", DType::kF32},
      {"deepseek_v3_bf16", "deepseek_v3", DType::kBF16},
      {"deepseek_v3_fp8", "deepseek_v3", DType::kBF16, Quantization::kFp8Block, true},
      {"kimi_k2_fp8", "deepseek_v3", DType::kBF16, Quantization::kFp8Block, false, true},
      {"glm4_moe_bf16", "glm4_moe", DType::kBF16},
      {"glm4_moe_fp8", "glm4_moe", DType::kBF16, Quantization::kFp8Block},
      {"gpt_oss_bf16", "gpt_oss", DType::kBF16},
      {"gpt_oss_mxfp4", "gpt_oss", DType::kBF16, Quantization::kMxfp4, true},
      {"llama4_bf16", "llama4", DType::kBF16},
      {"llama4_text_f32", "llama4_text", DType::kF32},
  };
}

// The per-row relative error the C, Python and doc tests allow a case's layer in its default storage against
// the family's float64 block on the exact weights (families.txt's last column). Plain files: 1e-5 (fp32
// roundings). A quantized file is held as stored and runs the quantized kernels, whose activation rule rounds
// both GEMM inputs (kernels/cpu/linear_quant.h): bf16 for FP8 (each element within 2^-9 of itself), int8
// blocks for MXFP4 (each element within 1/254 of its 32-element block's largest). Per output of a GEMM that
// is at most eps * sum_i |w_i x_i| with eps <= 2^-9 (bf16) or ~2^-8 (int8, for these fixtures' block maxima
// ~2x the element), and these fixtures' rows have sum |w x| ~4x |y|: ~1e-2 per GEMM, two GEMMs 2.5e-2.
// Measured: 0.006-0.008 (FP8 and MXFP4 fixtures alike). The kernels' own fp32 error is checked tightly, with
// and without the rule, by tests/kernels_cpu_quant_accuracy_test.cc.
inline double stored_tolerance(const FamilyCase& c) {
  return c.quant == io::Quantization::kNone ? 1e-5 : 2.5e-2;
}

inline const FamilyCase& family_case(const std::string& name) {
  static const std::vector<FamilyCase> cases = family_cases();
  for (const FamilyCase& c : cases) {
    if (c.name == name) return c;
  }
  throw std::invalid_argument("no family case " + name);
}

// One expert's FFN in float64, nn.Linear layout: gate, up [ff][d], down [d][ff]; biases (gpt-oss) or empty.
struct RefFfn {
  int64_t ff = 0;
  std::vector<double> gate, up, down, gate_bias, up_bias, down_bias;
};

// The float64 weights of one MoE layer, as the family's block computes with them (a quantized file's exact
// dequantized values; a bf16 file's bf16 values).
struct RefLayer {
  int64_t d = 0;
  int num_experts = 0;
  std::vector<double> router;       // [E][d]
  std::vector<double> router_bias;  // [E] (gpt-oss) or empty
  std::vector<double> score_bias;   // [E] (DeepSeek-V3, GLM-4.5) or empty
  std::vector<RefFfn> experts;
  std::optional<RefFfn> shared;
  std::vector<double> shared_gate;  // [d] (Qwen2-MoE) or empty
};

// A written checkpoint directory and what the tests need of it.
struct WrittenCheckpoint {
  std::filesystem::path dir;
  nlohmann::json config;  // the config.json written (for llama4: the whole file, text_config inside)
  int layer = 0;          // the MoE layer whose weights `ref` holds (the last MoE layer)
  std::vector<int> moe_layers;
  RefLayer ref;
};

namespace family_detail {

using nlohmann::json;

inline std::vector<std::byte> to_bytes(const std::vector<float>& v, kernels::DType dtype) {
  std::vector<std::byte> out(v.size() * kernels::dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == kernels::DType::kF32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t b = kernels::f32_to_bf16(v[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

// What a float becomes once stored in `dtype` and read back.
inline double stored(float v, kernels::DType dtype) {
  return dtype == kernels::DType::kF32 ? v : kernels::round_to_bf16(v);
}

// The FP8 e4m3 value of a code, written here from the format's definition (OCP e4m3fn), independently of
// moe/io/quantized.h: the reference dequantizer.
inline double fp8_reference(uint8_t code) {
  const int sign = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return sign ? -mag : mag;
}

inline double fp4_reference(uint8_t nibble) {
  const int sign = (nibble >> 3) & 1, e = (nibble >> 1) & 3, m = nibble & 1;
  const double mag = e == 0 ? m * 0.5 : (1.0 + m / 2.0) * std::pow(2.0, e - 1);
  return sign ? -mag : mag;
}

// A tensor list under construction: names, dtypes, shapes and owned bytes.
struct Tensors {
  std::vector<std::pair<io::TensorToWrite, std::vector<std::byte>>> items;
  void add(std::string name, std::string dtype, std::vector<int64_t> shape, std::vector<std::byte> bytes) {
    items.push_back(
        {io::TensorToWrite{std::move(name), std::move(dtype), std::move(shape), {}}, std::move(bytes)});
  }
  void add_floats(std::string name, std::vector<int64_t> shape, const std::vector<float>& v,
                  kernels::DType dtype) {
    add(std::move(name), std::string(io::safetensors_dtype_name(dtype)), std::move(shape),
        to_bytes(v, dtype));
  }
};

inline std::vector<float> uniform(std::mt19937_64& rng, size_t n, double bound) {
  std::uniform_real_distribution<double> u(-bound, bound);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(u(rng));
  return v;
}

// An FP8 matrix [rows, cols] with block scales: random codes (never NaN) and scales near 1/64 (F32, or BF16
// when `bf16_scales`, as some checkpoints store them). Fills `ref` with the exact dequantized values.
inline void add_fp8(Tensors& t, const std::string& name, int64_t rows, int64_t cols, io::Fp8BlockSize block,
                    bool bf16_scales, std::mt19937_64& rng, std::vector<double>& ref) {
  std::vector<std::byte> q(static_cast<size_t>(rows * cols));
  for (auto& b : q) {
    uint8_t code = static_cast<uint8_t>(rng() & 0xff);
    if ((code & 0x7f) == 0x7f) code ^= 0x08;  // the NaN codes 0x7f / 0xff become finite ones
    // Mostly moderate magnitudes (like trained weights), but every exponent occurs.
    if (rng() % 4 != 0) code = static_cast<uint8_t>((code & 0x87) | (((rng() % 5) + 4) << 3));
    b = static_cast<std::byte>(code);
  }
  const int64_t sr = (rows + block.rows - 1) / block.rows, sc = (cols + block.cols - 1) / block.cols;
  std::vector<float> scale(static_cast<size_t>(sr * sc));
  std::uniform_real_distribution<double> u(0.5, 2.0);
  for (float& s : scale) s = static_cast<float>(u(rng) / 256.0);
  if (bf16_scales) {
    for (float& s : scale) s = kernels::round_to_bf16(s);
  }
  ref.assign(static_cast<size_t>(rows * cols), 0.0);
  for (int64_t o = 0; o < rows; ++o) {
    for (int64_t i = 0; i < cols; ++i) {
      ref[static_cast<size_t>(o * cols + i)] =
          fp8_reference(static_cast<uint8_t>(q[static_cast<size_t>(o * cols + i)])) *
          static_cast<double>(scale[static_cast<size_t>((o / block.rows) * sc + i / block.cols)]);
    }
  }
  t.add(name, "F8_E4M3", {rows, cols}, std::move(q));
  t.add_floats(name + "_scale_inv", {sr, sc}, scale,
               bf16_scales ? kernels::DType::kBF16 : kernels::DType::kF32);
}

// MXFP4 blocks + scales of `num_experts` matrices [out, in] (gpt-oss layout [E, out, in / 32, 16] and
// [E, out, in / 32]); ref[e] receives expert e's dequantized [out][in] values. Scales around 2^-6 (trained
// weights' range), random nibbles.
inline void add_mxfp4(Tensors& t, const std::string& base, int num_experts, int64_t out, int64_t in,
                      std::mt19937_64& rng, std::vector<std::vector<double>>& ref) {
  const int64_t groups = in / 32;
  std::vector<std::byte> blocks(static_cast<size_t>(num_experts * out * groups * 16));
  std::vector<std::byte> scales(static_cast<size_t>(num_experts * out * groups));
  for (auto& b : blocks) b = static_cast<std::byte>(rng() & 0xff);
  for (auto& s : scales) s = static_cast<std::byte>(127 - 9 + static_cast<int>(rng() % 5));
  ref.assign(static_cast<size_t>(num_experts), std::vector<double>(static_cast<size_t>(out * in)));
  for (int e = 0; e < num_experts; ++e) {
    for (int64_t r = 0; r < out; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        const size_t row_group = static_cast<size_t>((e * out + r) * groups + g);
        const double scale = std::pow(2.0, static_cast<int>(scales[row_group]) - 127);
        for (int b = 0; b < 16; ++b) {
          const auto byte = static_cast<uint8_t>(blocks[row_group * 16 + static_cast<size_t>(b)]);
          const size_t at = static_cast<size_t>(r * in + g * 32 + 2 * b);
          ref[static_cast<size_t>(e)][at] = fp4_reference(byte & 15) * scale;      // low nibble first
          ref[static_cast<size_t>(e)][at + 1] = fp4_reference(byte >> 4) * scale;  // then the high one
        }
      }
    }
  }
  t.add(base + "_blocks", "U8", {num_experts, out, groups, 16}, std::move(blocks));
  t.add(base + "_scales", "U8", {num_experts, out, groups}, std::move(scales));
}

inline void write(const Tensors& t, const std::filesystem::path& path) {
  std::vector<io::TensorToWrite> list;
  for (const auto& [tensor, bytes] : t.items) {
    io::TensorToWrite w = tensor;
    w.bytes = bytes;
    list.push_back(w);
  }
  io::write_safetensors(path, list, {{"format", "pt"}});
}

// The layer prefix ("model.layers.3.mlp." ...) of a family.
inline std::string block_prefix(const std::string& model_type, int layer) {
  const std::string root = model_type == "llama4" ? "language_model.model." : "model.";
  const char* block = model_type == "mixtral"              ? "block_sparse_moe."
                      : model_type.rfind("llama4", 0) == 0 ? "feed_forward."
                                                           : "mlp.";
  return root + "layers." + std::to_string(layer) + "." + block;
}

}  // namespace family_detail

// Writes the checkpoint of `c` into `dir` (created; existing files replaced): config.json, the embedding,
// every layer's MLP (dense layers' plain gate/up/down, MoE layers' full expert set), a DeepSeek/GLM MTP
// layer after the last where the family has one. Returns the last MoE layer's float64 weights.
inline WrittenCheckpoint write_family_checkpoint(const FamilyCase& c, const std::filesystem::path& dir,
                                                 uint64_t seed = 7) {
  using namespace family_detail;
  using kernels::DType;
  std::filesystem::create_directories(dir);
  const std::string& mt = c.model_type;
  const io::Architecture arch = mt == "mixtral"       ? io::Architecture::kMixtral
                                : mt == "qwen2_moe"   ? io::Architecture::kQwen2Moe
                                : mt == "qwen3_moe"   ? io::Architecture::kQwen3Moe
                                : mt == "olmoe"       ? io::Architecture::kOlmoe
                                : mt == "deepseek_v2" ? io::Architecture::kDeepseekV2
                                : mt == "deepseek_v3" ? io::Architecture::kDeepseekV3
                                : mt == "glm4_moe"    ? io::Architecture::kGlm4Moe
                                : mt == "gpt_oss"     ? io::Architecture::kGptOss
                                                      : io::Architecture::kLlama4;
  const int64_t d = 64, vocab = 32, dense_ff = 96;
  const int num_layers = 4;
  json cfg = {{"model_type", mt},
              {"hidden_size", d},
              {"num_hidden_layers", num_layers},
              {"vocab_size", vocab},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 4},
              {"hidden_act", "silu"},
              {"rms_norm_eps", 1e-6},
              {"max_position_embeddings", 4096},
              {"tie_word_embeddings", false},
              {"torch_dtype", c.dtype == DType::kF32 ? "float32" : "bfloat16"}};
  io::LayerShape shape;
  shape.hidden = d;
  std::vector<int> moe_layers;
  auto all = [&] {
    for (int i = 0; i < num_layers; ++i) moe_layers.push_back(i);
  };
  if (mt == "mixtral") {
    shape.expert_ff = 48;
    shape.num_experts = 8;
    cfg.update({{"architectures", {"MixtralForCausalLM"}},
                {"intermediate_size", 48},
                {"num_local_experts", 8},
                {"num_experts_per_tok", 2},
                {"router_jitter_noise", 0.0}});
    all();
  } else if (mt == "qwen2_moe" || mt == "qwen3_moe") {
    shape.expert_ff = 40;
    shape.num_experts = 8;
    const bool qwen2 = mt == "qwen2_moe";
    cfg.update({{"intermediate_size", dense_ff},
                {"moe_intermediate_size", 40},
                {"num_experts", 8},
                {"num_experts_per_tok", 4},
                {"norm_topk_prob", !qwen2},
                {"decoder_sparse_step", qwen2 ? 1 : 2},
                {"mlp_only_layers", qwen2 ? json::array({0}) : json::array()}});
    if (qwen2) {
      cfg["architectures"] = {"Qwen2MoeForCausalLM"};
      cfg["shared_expert_intermediate_size"] = 72;
      shape.num_shared_experts = 1;
      shape.shared_ff = 72;
      shape.shared_expert_gate = true;
      moe_layers = {1, 2, 3};
    } else {
      cfg["architectures"] = {"Qwen3MoeForCausalLM"};
      moe_layers = {1, 3};
    }
  } else if (mt == "olmoe") {
    shape.expert_ff = 32;
    shape.num_experts = 16;
    cfg.update({{"architectures", {"OlmoeForCausalLM"}},
                {"intermediate_size", 32},
                {"num_experts", 16},
                {"num_experts_per_tok", 4},
                {"norm_topk_prob", false},
                {"clip_qkv", nullptr}});
    all();
  } else if (mt == "deepseek_v2") {
    shape.expert_ff = 32;
    shape.num_experts = 16;
    shape.num_shared_experts = 2;
    shape.shared_ff = 64;
    cfg.update({{"architectures", {"DeepseekV2ForCausalLM"}},
                {"intermediate_size", dense_ff},
                {"moe_intermediate_size", 32},
                {"n_routed_experts", 16},
                {"n_shared_experts", 2},
                {"num_experts_per_tok", 3},
                {"n_group", 4},
                {"topk_group", 2},
                {"topk_method", "group_limited_greedy"},
                {"scoring_func", "softmax"},
                {"norm_topk_prob", false},
                {"routed_scaling_factor", 16.0},
                {"first_k_dense_replace", 1},
                {"moe_layer_freq", 1},
                {"aux_loss_alpha", 0.001},
                {"seq_aux", true}});
    moe_layers = {1, 2, 3};
  } else if (mt == "deepseek_v3" || mt == "glm4_moe") {
    shape.expert_ff = 40;
    shape.num_experts = 16;
    shape.num_shared_experts = 1;
    shape.shared_ff = 40;
    shape.score_bias = true;
    const bool glm = mt == "glm4_moe";
    cfg.update({{"intermediate_size", dense_ff},
                {"moe_intermediate_size", 40},
                {"n_routed_experts", 16},
                {"n_shared_experts", 1},
                {"num_experts_per_tok", 4},
                {"norm_topk_prob", true},
                {"first_k_dense_replace", glm ? 2 : 1},
                {"num_nextn_predict_layers", 1}});
    if (glm) {
      cfg.update({{"architectures", {"Glm4MoeForCausalLM"}},
                  {"n_group", 1},
                  {"topk_group", 1},
                  {"routed_scaling_factor", 2.5},
                  {"partial_rotary_factor", 0.5},
                  {"use_qk_norm", true}});
      moe_layers = {2, 3};
    } else {
      cfg.update({{"architectures", {"DeepseekV3ForCausalLM"}},
                  {"topk_method", "noaux_tc"},
                  {"scoring_func", "sigmoid"},
                  {"moe_layer_freq", 1},
                  {"n_group", c.kimi ? 1 : 4},
                  {"topk_group", c.kimi ? 1 : 2},
                  {"routed_scaling_factor", c.kimi ? 2.827 : 2.5}});
      moe_layers = {1, 2, 3};
    }
  } else if (mt == "gpt_oss") {
    shape.expert_ff = 32;
    shape.num_experts = 8;
    shape.router_bias = true;
    shape.expert_bias = true;
    cfg.update({{"architectures", {"GptOssForCausalLM"}},
                {"intermediate_size", 32},
                {"num_local_experts", 8},
                {"num_experts_per_tok", 4},
                {"experts_per_token", 4},
                {"swiglu_limit", 1.25},
                {"head_dim", 16},
                {"sliding_window", 128},
                {"attention_bias", true}});
    all();
  } else {  // llama4, llama4_text
    shape.expert_ff = 48;
    shape.num_experts = 8;
    shape.num_shared_experts = 1;
    shape.shared_ff = 48;
    const bool text = mt == "llama4_text";
    json t = cfg;
    t.update({{"intermediate_size", 48},
              {"intermediate_size_mlp", dense_ff},
              {"num_local_experts", 8},
              {"num_experts_per_tok", 1},
              {"interleave_moe_layer_step", text ? 1 : 2},
              {"use_qk_norm", true},
              {"attention_chunk_size", 8192}});
    if (text) {
      t["architectures"] = {"Llama4ForCausalLM"};
      cfg = t;
      all();
    } else {
      t["model_type"] = "llama4_text";
      cfg = {{"model_type", "llama4"},
             {"architectures", {"Llama4ForConditionalGeneration"}},
             {"text_config", t},
             {"vision_config", {{"model_type", "llama4_vision_model"}}},
             {"tie_word_embeddings", false}};
      moe_layers = {1, 3};
    }
  }
  const bool fp8 = c.quant == io::Quantization::kFp8Block;
  const io::Fp8BlockSize block{16, 16};
  if (fp8) {
    cfg["quantization_config"] = {{"activation_scheme", "dynamic"},
                                  {"fmt", "e4m3"},
                                  {"quant_method", "fp8"},
                                  {"weight_block_size", {block.rows, block.cols}}};
  }
  if (c.quant == io::Quantization::kMxfp4) {
    cfg["quantization_config"] = {
        {"modules_to_not_convert",
         {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
        {"quant_method", "mxfp4"}};
  }

  std::mt19937_64 rng(seed);
  WrittenCheckpoint w;
  w.dir = dir;
  w.config = cfg;
  w.moe_layers = moe_layers;
  w.layer = moe_layers.back();
  Tensors shard[2];
  const std::string root = mt == "llama4" ? "language_model.model." : "model.";
  shard[0].add_floats(root + "embed_tokens.weight", {vocab, d},
                      uniform(rng, static_cast<size_t>(vocab * d), 1.0), c.dtype);
  const DType plain = c.dtype;  // gates, biases, dense MLPs
  for (int layer = 0; layer < num_layers + (cfg.contains("num_nextn_predict_layers") ? 1 : 0); ++layer) {
    Tensors& t = shard[c.sharded && layer >= 2 ? 1 : 0];
    const bool moe = std::find(moe_layers.begin(), moe_layers.end(), layer) != moe_layers.end() ||
                     layer == num_layers;  // the MTP layer is an MoE layer too
    if (!moe) {
      const std::string p = block_prefix(mt, layer);
      t.add_floats(p + "gate_proj.weight", {dense_ff, d},
                   uniform(rng, static_cast<size_t>(dense_ff * d), 0.1), plain);
      t.add_floats(p + "up_proj.weight", {dense_ff, d}, uniform(rng, static_cast<size_t>(dense_ff * d), 0.1),
                   plain);
      t.add_floats(p + "down_proj.weight", {d, dense_ff},
                   uniform(rng, static_cast<size_t>(dense_ff * d), 0.1), plain);
      continue;
    }
    // The layer's weights: seeded random values in the storage dtype, then the family's tensors.
    const io::LayerWeights lw = io::random_layer(shape, c.dtype, seed * 1000 + static_cast<uint64_t>(layer));
    std::vector<std::vector<std::byte>> scratch;
    std::vector<io::TensorToWrite> tensors = io::layer_tensors(lw, arch, layer, scratch);
    if (mt == "llama4_text") {  // layer_tensors writes the multimodal root; the text model's is model.
      for (io::TensorToWrite& tw : tensors)
        tw.name = "model." + tw.name.substr(std::string("language_model.model.").size());
    }
    RefLayer ref;
    ref.d = d;
    ref.num_experts = shape.num_experts;
    auto floats_of = [](const io::TensorToWrite& tw) {
      std::vector<float> v(tw.bytes.size() / (tw.dtype == "F32" ? 4 : 2));
      for (size_t i = 0; i < v.size(); ++i) {
        if (tw.dtype == "F32") {
          std::memcpy(&v[i], tw.bytes.data() + 4 * i, 4);
        } else {
          uint16_t b;
          std::memcpy(&b, tw.bytes.data() + 2 * i, 2);
          v[i] = kernels::bf16_to_f32(b);
        }
      }
      return v;
    };
    auto matrix_of = [](const kernels::MatrixView& m) {
      std::vector<double> v(static_cast<size_t>(m.rows * m.cols));
      for (int64_t r = 0; r < m.rows; ++r) {
        for (int64_t col = 0; col < m.cols; ++col) {
          const size_t at = static_cast<size_t>(r * m.row_stride + col);
          v[static_cast<size_t>(r * m.cols + col)] =
              m.dtype == DType::kF32 ? static_cast<const float*>(m.data)[at]
                                     : kernels::bf16_to_f32(static_cast<const uint16_t*>(m.data)[at]);
        }
      }
      return v;
    };
    auto ffn_of = [&](const io::ExpertTensors& e, int64_t ff) {
      RefFfn f;
      f.ff = ff;
      f.gate = matrix_of(e.gate_proj);
      f.up = matrix_of(e.up_proj);
      f.down = matrix_of(e.down_proj);
      // Biases are written in the file's plain dtype (gpt-oss's bf16), so the reference takes that value.
      for (float b : e.gate_bias) f.gate_bias.push_back(stored(b, plain));
      for (float b : e.up_bias) f.up_bias.push_back(stored(b, plain));
      for (float b : e.down_bias) f.down_bias.push_back(stored(b, plain));
      return f;
    };
    for (const io::ExpertTensors& e : lw.experts()) ref.experts.push_back(ffn_of(e, shape.expert_ff));
    if (lw.shared()) ref.shared = ffn_of(*lw.shared(), shape.shared_ff);
    for (const io::TensorToWrite& tw : tensors) {
      const std::string& n = tw.name;
      const bool is_gate = n.ends_with("gate.weight") || n.ends_with("router.weight");
      const bool is_vector = n.ends_with("router.bias") || n.ends_with("e_score_correction_bias") ||
                             n.ends_with("_proj_bias") || n.ends_with("shared_expert_gate.weight");
      std::vector<float> v = floats_of(tw);
      if (is_gate || is_vector) {
        // Gates and biases in the file's plain dtype, except the score bias (kept fp32 in the published
        // DeepSeek-V3 and GLM-4.5 files).
        const DType dt = n.ends_with("e_score_correction_bias") ? DType::kF32 : plain;
        std::vector<double> values;
        for (float x : v) values.push_back(stored(x, dt));
        if (n.ends_with("gate.weight") && !n.ends_with("shared_expert_gate.weight")) ref.router = values;
        if (n.ends_with("router.weight")) ref.router = values;
        if (n.ends_with("router.bias")) ref.router_bias = values;
        if (n.ends_with("e_score_correction_bias")) ref.score_bias = values;
        if (n.ends_with("shared_expert_gate.weight")) ref.shared_gate = values;
        t.add_floats(n, tw.shape, v, dt);
        continue;
      }
      const bool expert_matrix =
          n.find(".experts.") != std::string::npos || n.find("shared_expert") != std::string::npos;
      if (fp8 && expert_matrix) {
        // The matrix becomes FP8 codes with block scales: the reference takes the dequantized values.
        std::vector<double> q;
        add_fp8(t, n, tw.shape[0], tw.shape[1], block, mt == "qwen3_moe", rng, q);
        // Which matrix of which expert: parse "...experts.{e}.{proj}.weight" / "...shared_experts.{proj}".
        RefFfn* f = nullptr;
        const size_t at = n.find(".experts.");
        if (at != std::string::npos) {
          f = &ref.experts[static_cast<size_t>(std::stoi(n.substr(at + 9)))];
        } else {
          f = &*ref.shared;
        }
        if (n.find("gate_proj") != std::string::npos) f->gate = q;
        if (n.find("up_proj") != std::string::npos) f->up = q;
        if (n.find("down_proj") != std::string::npos) f->down = q;
        continue;
      }
      if (c.quant == io::Quantization::kMxfp4 &&
          (n.ends_with("experts.gate_up_proj") || n.ends_with("experts.down_proj"))) {
        std::vector<std::vector<double>> q;
        const bool gate_up = n.ends_with("gate_up_proj");
        const int64_t out = gate_up ? 2 * shape.expert_ff : d, in = gate_up ? d : shape.expert_ff;
        add_mxfp4(t, n, shape.num_experts, out, in, rng, q);
        for (int e = 0; e < shape.num_experts; ++e) {
          RefFfn& f = ref.experts[static_cast<size_t>(e)];
          if (!gate_up) {
            f.down = q[static_cast<size_t>(e)];
            continue;
          }
          // Rows 2j / 2j + 1 of the [2 ff, d] matrix are gate row j / up row j (interleaved).
          for (int64_t j = 0; j < shape.expert_ff; ++j) {
            for (int64_t i = 0; i < d; ++i) {
              f.gate[static_cast<size_t>(j * d + i)] =
                  q[static_cast<size_t>(e)][static_cast<size_t>(2 * j * d + i)];
              f.up[static_cast<size_t>(j * d + i)] =
                  q[static_cast<size_t>(e)][static_cast<size_t>((2 * j + 1) * d + i)];
            }
          }
        }
        continue;
      }
      t.add(n, tw.dtype, tw.shape, std::vector<std::byte>(tw.bytes.begin(), tw.bytes.end()));
    }
    if (layer == w.layer) w.ref = std::move(ref);
  }
  if (c.sharded) {
    write(shard[0], dir / "model-00001-of-00002.safetensors");
    write(shard[1], dir / "model-00002-of-00002.safetensors");
    json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
    for (int s = 0; s < 2; ++s) {
      for (const auto& [tensor, bytes] : shard[s].items) {
        index["weight_map"][tensor.name] =
            s == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
      }
    }
    std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
    std::filesystem::remove(dir / "model.safetensors");
  } else {
    for (auto& item : shard[1].items) shard[0].items.push_back(std::move(item));
    write(shard[0], dir / "model.safetensors");
  }
  std::ofstream(dir / "config.json") << cfg.dump(2);
  return w;
}

// A family case's checkpoint written once per process (under a temporary directory removed at exit), with
// its parsed config.json: for tests that build many layers of one checkpoint (the case table).
struct WrittenFamily {
  WrittenCheckpoint checkpoint;
  io::PretrainedConfig config;
};

inline const WrittenFamily& written_family(const std::string& case_name) {
  struct Store {
    std::filesystem::path root = std::filesystem::temp_directory_path() /
                                 ("moe_families_" + std::to_string(static_cast<long>(::getpid())));
    std::map<std::string, WrittenFamily> written;
    ~Store() {
      std::error_code ec;
      std::filesystem::remove_all(root, ec);
    }
  };
  static Store store;
  auto it = store.written.find(case_name);
  if (it == store.written.end()) {
    WrittenFamily f;
    f.checkpoint = write_family_checkpoint(family_case(case_name), store.root / case_name);
    f.config = io::read_pretrained_config(f.checkpoint.dir);
    it = store.written.emplace(case_name, std::move(f)).first;
  }
  return it->second;
}

}  // namespace moe::testing
