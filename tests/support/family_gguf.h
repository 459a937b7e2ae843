// Small GGUF files of each MoE architecture llama.cpp writes, in its layout: general.architecture and the
// architecture's metadata keys as convert_hf_to_gguf.py writes them, llama.cpp's tensor names and ne order,
// the experts stacked per layer (or Mixtral's older per-expert tensors, or gate and up fused), dense leading
// layers and MTP layers where the family has them, each tensor type of the project's list, single and split
// files; with the float64 weights of the MoE layer the tests use (the exact values of the stored blocks, by
// tests/support/gguf_blocks.h's reference dequantizer) and the Hugging Face config.json keys of the same
// model, which tests/support/family_reference.h's float64 block reads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "tests/support/family_checkpoints.h"
#include "tests/support/gguf_blocks.h"
#include "tests/support/gguf_writer.h"

namespace moe::testing {

struct GgufFamilyCase {
  std::string name;                     // gtest-safe
  std::string arch;                     // general.architecture
  uint32_t type = ggml_type::F32;       // the experts' (routed and shared) gate and up matrices
  uint32_t down_type = ggml_type::F32;  // their down matrices (a Q4_K_M file's are Q6_K)
  std::string variant;                  // deepseek2: "v2", "v3" or "kimi"
  int shards = 1;                       // > 1: llama.cpp's split files
  bool per_expert = false;              // Mixtral's per-expert tensors (blk.N.ffn_gate.E.weight)
  bool fused_gate_up = false;           // blk.N.ffn_gate_up_exps.weight
};

// One case per architecture (deepseek2 three times: DeepSeek-V2, V3, Kimi K2), each tensor type at least
// once, a split file, Mixtral's per-expert names and fused gate/up experts.
inline std::vector<GgufFamilyCase> gguf_family_cases() {
  using namespace ggml_type;
  return {
      {"llama_f16", "llama", F16, F16, "", 1, false, false},
      {"llama_q4_k_m_split", "llama", Q4_K, Q6_K, "", 3, false, false},
      {"llama_per_expert_bf16", "llama", BF16, BF16, "", 1, true, false},
      {"qwen2moe_q8_0", "qwen2moe", Q8_0, Q8_0, "", 1, false, false},
      {"qwen3moe_q6_k", "qwen3moe", Q6_K, Q6_K, "", 1, false, false},
      {"olmoe_f32", "olmoe", F32, F32, "", 1, false, false},
      {"deepseek2_v2_f16", "deepseek2", F16, F16, "v2", 1, false, false},
      {"deepseek2_v3_q4_k_fused", "deepseek2", Q4_K, Q4_K, "v3", 1, false, true},
      {"kimi_k2_bf16", "deepseek2", BF16, BF16, "kimi", 1, false, false},
      {"glm4moe_bf16", "glm4moe", BF16, BF16, "", 1, false, false},
      {"gpt_oss_mxfp4", "gpt-oss", MXFP4, MXFP4, "", 1, false, false},
      {"llama4_bf16", "llama4", BF16, BF16, "", 1, false, false},
  };
}

inline const GgufFamilyCase& gguf_family_case(const std::string& name) {
  static const std::vector<GgufFamilyCase> cases = gguf_family_cases();
  for (const GgufFamilyCase& c : cases) {
    if (c.name == name) return c;
  }
  throw std::invalid_argument("no GGUF family case " + name);
}

inline bool is_quantized(uint32_t type) {
  return type != ggml_type::F32 && type != ggml_type::F16 && type != ggml_type::BF16;
}

// The dtype a case's experts are held in by default (as stored; F16 widened to f32).
inline kernels::DType gguf_stored_dtype(uint32_t type) {
  using kernels::DType;
  switch (type) {
    case ggml_type::BF16:
      return DType::kBF16;
    case ggml_type::Q8_0:
      return DType::kQ8_0;
    case ggml_type::Q4_K:
      return DType::kQ4_K;
    case ggml_type::Q6_K:
      return DType::kQ6_K;
    case ggml_type::MXFP4:
      return DType::kMXFP4;
    default:
      return DType::kF32;
  }
}

// The per-row relative error the tests allow a case's layer as stored against the family's float64 block on
// the stored blocks' exact values (gguf.txt's tolerance column). Plain types: 1e-5 (fp32 roundings). The
// quantized types run the quantized kernels, whose activation rule rounds each row of activations to int8 in
// blocks of 32 (Q8_0, MXFP4) or 256 (Q4_K, Q6_K): each element within 1/254 of its block's largest, so per
// GEMM output at most ~2^-8 (largest / element) sum_i |w_i x_i|; these fixtures' blocks of 32 have largest
// elements ~2x the typical one and their blocks of 256 ~3x, and rows sum |w x| ~4x |y|: ~2.5e-2 (as
// families.txt's MXFP4 and FP8 cases, tests/support/family_checkpoints.h) and ~5e-2 over the two GEMMs.
// Measured: Q8_0 0.018, MXFP4 0.013, Q6_K 0.022, Q4_K (Q4_K_M) 0.023-0.029.
inline double gguf_stored_tolerance(const GgufFamilyCase& c) {
  auto k_quant = [](uint32_t t) { return t == ggml_type::Q4_K || t == ggml_type::Q6_K; };
  if (k_quant(c.type) || k_quant(c.down_type)) return 5e-2;
  return is_quantized(c.type) || is_quantized(c.down_type) ? 2.5e-2 : 1e-5;
}

namespace gguf_detail {

// `rows` x `cols` values (row-major) encoded row by row as `type`; `ref` (if given) receives the exact values
// of what was stored.
inline std::string encode(const std::vector<float>& v, int64_t rows, int64_t cols, uint32_t type,
                          std::vector<double>* ref) {
  std::string out;
  for (int64_t r = 0; r < rows; ++r) quantize_row(v.data() + r * cols, cols, type, out);
  if (ref) {
    ref->clear();
    const auto* p = reinterpret_cast<const uint8_t*>(out.data());
    const int64_t row_bytes = cols / block_elements(type) * block_bytes(type);
    for (int64_t r = 0; r < rows; ++r) dequantize_reference(p + r * row_bytes, cols, type, *ref);
  }
  return out;
}

inline std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

inline std::vector<double> widen(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace gguf_detail

// Writes the case's model into `dir` (created): a .gguf file, or `shards` split files. Returns the written
// model: `dir` is the (first) file's path, `config` the equivalent config.json keys, `ref` the float64
// weights of MoE layer `layer` (the last one). `edit` (if given) changes the file before it is written (the
// refusal tests' corruptions).
inline WrittenCheckpoint write_family_gguf(const GgufFamilyCase& c, const std::filesystem::path& dir,
                                           const std::function<void(GgufWriter&)>& edit = {},
                                           uint64_t seed = 11) {
  using namespace gguf_detail;
  using nlohmann::json;
  std::filesystem::create_directories(dir);
  const std::string& a = c.arch;
  const bool kquant = c.type == ggml_type::Q4_K || c.type == ggml_type::Q6_K ||
                      c.down_type == ggml_type::Q4_K || c.down_type == ggml_type::Q6_K;
  const int64_t d = kquant ? 256 : 64, ff = kquant ? 256 : 32, dense_ff = 96, vocab = 32;
  const bool deepseek = a == "deepseek2", glm = a == "glm4moe";
  const int E = deepseek ? 16 : 8;
  int k = 4, block_count = 2;
  std::vector<int> moe_layers = {0, 1};
  int extra_layers = 0;  // MTP layers after the last (GLM)
  int shared = 0;        // shared experts (fused), DeepSeek / GLM count; 1 for Qwen2-MoE and Llama 4
  int64_t shared_ff = 0;
  json cfg;  // the equivalent config.json, for family_reference
  GgufWriter w;
  w.add("general.architecture", gguf_str(a));
  w.add("general.name", gguf_str("tiny " + c.name));
  auto key = [&](const std::string& k_) { return a + "." + k_; };
  if (a == "llama") {
    k = 2;
    cfg = {{"model_type", "mixtral"}};
  } else if (a == "qwen2moe") {
    shared = 1;
    shared_ff = 96;
    cfg = {{"model_type", "qwen2_moe"}, {"norm_topk_prob", false}};
    w.add(key("expert_feed_forward_length"), gguf_u32(static_cast<uint32_t>(ff)));
    w.add(key("expert_shared_feed_forward_length"), gguf_u32(static_cast<uint32_t>(shared_ff)));
  } else if (a == "qwen3moe") {
    cfg = {{"model_type", "qwen3_moe"}, {"norm_topk_prob", true}};
    w.add(key("expert_feed_forward_length"), gguf_u32(static_cast<uint32_t>(ff)));
  } else if (a == "olmoe") {
    cfg = {{"model_type", "olmoe"}, {"norm_topk_prob", false}};
  } else if (deepseek || glm) {
    block_count = 3;
    w.add(key("leading_dense_block_count"), gguf_u32(1));
    w.add(key("expert_feed_forward_length"), gguf_u32(static_cast<uint32_t>(ff)));
    w.add(key("vocab_size"), gguf_u32(static_cast<uint32_t>(vocab)));
    if (glm) {
      extra_layers = 1;
      moe_layers = {1};
      shared = 1;
      cfg = {{"model_type", "glm4_moe"},
             {"n_group", 1},
             {"topk_group", 1},
             {"norm_topk_prob", true},
             {"routed_scaling_factor", 2.5}};
      w.add(key("expert_shared_count"), gguf_u32(1));
      w.add(key("expert_gating_func"), gguf_u32(2));
      w.add(key("expert_weights_scale"), gguf_f32(2.5f));
      w.add(key("expert_weights_norm"), gguf_bool(true));
      w.add(key("nextn_predict_layers"), gguf_u32(1));
    } else if (c.variant == "v2") {
      moe_layers = {1, 2};
      k = 3;
      shared = 2;
      cfg = {{"model_type", "deepseek_v2"},
             {"n_group", 4},
             {"topk_group", 2},
             {"topk_method", "group_limited_greedy"},
             {"routed_scaling_factor", 16.0}};
      w.add(key("expert_shared_count"), gguf_u32(2));
      w.add(key("expert_weights_scale"), gguf_f32(16.0f));
      w.add(key("expert_group_count"), gguf_u32(4));
      w.add(key("expert_group_used_count"), gguf_u32(2));
      // DeepSeek-V2 files from before expert_gating_func: llama.cpp reads them as softmax.
    } else {
      moe_layers = {1, 2};
      shared = 1;
      const bool kimi = c.variant == "kimi";
      const double scale = kimi ? 2.827 : 2.5;
      cfg = {{"model_type", "deepseek_v3"},
             {"n_group", kimi ? 1 : 4},
             {"topk_group", kimi ? 1 : 2},
             {"norm_topk_prob", true},
             {"routed_scaling_factor", scale}};
      w.add(key("expert_shared_count"), gguf_u32(1));
      w.add(key("expert_gating_func"), gguf_u32(2));
      w.add(key("expert_weights_scale"), gguf_f32(static_cast<float>(scale)));
      w.add(key("expert_weights_norm"), gguf_bool(true));
      w.add(key("expert_group_count"), gguf_u32(kimi ? 1 : 4));
      w.add(key("expert_group_used_count"), gguf_u32(kimi ? 1 : 2));
    }
    shared_ff = ff * shared;
  } else if (a == "gpt-oss") {
    cfg = {{"model_type", "gpt_oss"}, {"swiglu_limit", 7.0}};
    w.add(key("expert_feed_forward_length"), gguf_u32(static_cast<uint32_t>(ff)));
    w.add(key("attention.sliding_window"), gguf_u32(128));
  } else if (a == "llama4") {
    k = 1;
    block_count = 4;
    moe_layers = {1, 3};
    shared = 1;
    shared_ff = ff;
    cfg = {{"model_type", "llama4_text"}};
    w.add(key("expert_feed_forward_length"), gguf_u32(static_cast<uint32_t>(ff)));
    w.add(key("interleave_moe_layer_step"), gguf_u32(2));
  } else {
    throw std::invalid_argument("write_family_gguf: architecture " + a);
  }
  cfg["num_experts_per_tok"] = k;
  const bool expert_ff_is_ff = a == "llama" || a == "olmoe";
  w.add(key("block_count"), gguf_u32(static_cast<uint32_t>(block_count)));
  w.add(key("context_length"), gguf_u32(4096));
  w.add(key("embedding_length"), gguf_u32(static_cast<uint32_t>(d)));
  w.add(key("feed_forward_length"), gguf_u32(static_cast<uint32_t>(expert_ff_is_ff ? ff : dense_ff)));
  w.add(key("attention.head_count"), gguf_u32(4));
  w.add(key("attention.head_count_kv"), gguf_u32(4));
  w.add(key("attention.layer_norm_rms_epsilon"), gguf_f32(1e-6f));
  w.add(key("rope.freq_base"), gguf_f32(10000.0f));
  w.add(key("expert_count"), gguf_u32(static_cast<uint32_t>(E)));
  w.add(key("expert_used_count"), gguf_u32(static_cast<uint32_t>(k)));
  const uint32_t ftype = c.type == ggml_type::F32     ? 0
                         : c.type == ggml_type::F16   ? 1
                         : c.type == ggml_type::BF16  ? 32
                         : c.type == ggml_type::Q8_0  ? 7
                         : c.type == ggml_type::Q6_K  ? 18
                         : c.type == ggml_type::MXFP4 ? 38
                                                      : 15;
  w.add("general.file_type", gguf_u32(ftype));
  if (is_quantized(c.type)) w.add("general.quantization_version", gguf_u32(2));
  std::vector<GgufValueBytes> tokens;
  for (int t = 0; t < vocab; ++t) tokens.push_back(gguf_str("tok" + std::to_string(t)));
  w.add("tokenizer.ggml.model", gguf_str("gpt2"));
  w.add("tokenizer.ggml.tokens", gguf_array(GgufType::String, tokens));

  std::mt19937_64 rng(seed);
  auto rand = [&](int64_t n, double bound) {
    return family_detail::uniform(rng, static_cast<size_t>(n), bound);
  };
  std::vector<int> shard_of;  // per tensor, for split files
  auto add = [&](const std::string& name, std::vector<int64_t> ne, uint32_t type, std::string bytes,
                 int layer) {
    w.add_tensor(name, std::move(ne), type, std::move(bytes));
    shard_of.push_back(c.shards == 1 ? 0 : layer < 0 ? 0 : 1 + layer * (c.shards - 1) / block_count);
  };
  auto zeros = [](int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.0f); };
  add("token_embd.weight", {d, vocab}, ggml_type::F32, f32_bytes(rand(d * vocab, 1.0)), -1);
  add("output_norm.weight", {d}, ggml_type::F32, f32_bytes(std::vector<float>(static_cast<size_t>(d), 1.0f)),
      -1);
  WrittenCheckpoint out;
  out.moe_layers = moe_layers;
  out.layer = moe_layers.back();
  out.config = cfg;
  RefLayer& ref = out.ref;
  ref.d = d;
  ref.num_experts = E;
  const double in_bound = 1 / std::sqrt(static_cast<double>(d)),
               ff_bound = 1 / std::sqrt(static_cast<double>(ff));
  for (int layer = 0; layer < block_count; ++layer) {
    const std::string p = "blk." + std::to_string(layer) + ".";
    add(p + "attn_norm.weight", {d}, ggml_type::F32,
        f32_bytes(std::vector<float>(static_cast<size_t>(d), 1.0f)), layer);
    add(p + "ffn_norm.weight", {d}, ggml_type::F32,
        f32_bytes(std::vector<float>(static_cast<size_t>(d), 1.0f)), layer);
    const bool mtp = layer >= block_count - extra_layers;
    const bool moe = mtp || std::find(moe_layers.begin(), moe_layers.end(), layer) != moe_layers.end();
    if (!moe) {  // a dense MLP
      add(p + "ffn_gate.weight", {d, dense_ff}, ggml_type::F32, f32_bytes(zeros(d * dense_ff)), layer);
      add(p + "ffn_up.weight", {d, dense_ff}, ggml_type::F32, f32_bytes(zeros(d * dense_ff)), layer);
      add(p + "ffn_down.weight", {dense_ff, d}, ggml_type::F32, f32_bytes(zeros(d * dense_ff)), layer);
      continue;
    }
    const bool tested = layer == out.layer;  // the other MoE layers' experts are zeros (cheap, valid blocks)
    const std::vector<float> router = rand(E * d, in_bound);
    add(p + "ffn_gate_inp.weight", {d, E}, ggml_type::F32, f32_bytes(router), layer);
    if (tested) ref.router = widen(router);
    if ((deepseek && c.variant != "v2") || glm) {
      const std::vector<float> bias = rand(E, 0.05);
      add(p + "exp_probs_b.bias", {E}, ggml_type::F32, f32_bytes(bias), layer);
      if (tested) ref.score_bias = widen(bias);
    }
    if (a == "gpt-oss") {
      const std::vector<float> bias = rand(E, 0.5);
      add(p + "ffn_gate_inp.bias", {E}, ggml_type::F32, f32_bytes(bias), layer);
      if (tested) ref.router_bias = widen(bias);
    }
    // The experts' matrices, [out][in] row-major per expert.
    std::vector<std::vector<float>> gate(E), up(E), down(E);
    for (int e = 0; e < E; ++e) {
      gate[e] = tested ? rand(ff * d, in_bound) : zeros(ff * d);
      up[e] = tested ? rand(ff * d, in_bound) : zeros(ff * d);
      down[e] = tested ? rand(d * ff, ff_bound) : zeros(d * ff);
    }
    if (tested) ref.experts.assign(static_cast<size_t>(E), RefFfn{ff, {}, {}, {}, {}, {}, {}});
    if (c.per_expert) {
      for (int e = 0; e < E; ++e) {
        RefFfn* f = tested ? &ref.experts[static_cast<size_t>(e)] : nullptr;
        const std::string s = std::to_string(e);
        add(p + "ffn_gate." + s + ".weight", {d, ff}, c.type,
            encode(gate[e], ff, d, c.type, f ? &f->gate : nullptr), layer);
        add(p + "ffn_up." + s + ".weight", {d, ff}, c.type,
            encode(up[e], ff, d, c.type, f ? &f->up : nullptr), layer);
        add(p + "ffn_down." + s + ".weight", {ff, d}, c.down_type,
            encode(down[e], d, ff, c.down_type, f ? &f->down : nullptr), layer);
      }
    } else {
      std::string gates, ups, downs, gate_ups;
      for (int e = 0; e < E; ++e) {
        RefFfn* f = tested ? &ref.experts[static_cast<size_t>(e)] : nullptr;
        const std::string g = encode(gate[e], ff, d, c.type, f ? &f->gate : nullptr);
        const std::string u = encode(up[e], ff, d, c.type, f ? &f->up : nullptr);
        (c.fused_gate_up ? gate_ups : gates) += g;
        (c.fused_gate_up ? gate_ups : ups) += u;
        downs += encode(down[e], d, ff, c.down_type, f ? &f->down : nullptr);
      }
      if (c.fused_gate_up) {
        add(p + "ffn_gate_up_exps.weight", {d, 2 * ff, E}, c.type, std::move(gate_ups), layer);
      } else {
        add(p + "ffn_gate_exps.weight", {d, ff, E}, c.type, std::move(gates), layer);
        add(p + "ffn_up_exps.weight", {d, ff, E}, c.type, std::move(ups), layer);
      }
      add(p + "ffn_down_exps.weight", {ff, d, E}, c.down_type, std::move(downs), layer);
    }
    if (a == "gpt-oss") {
      std::vector<float> gb, ub, db;
      for (int e = 0; e < E; ++e) {
        const std::vector<float> g = rand(ff, in_bound), u = rand(ff, in_bound), dn = rand(d, ff_bound);
        gb.insert(gb.end(), g.begin(), g.end());
        ub.insert(ub.end(), u.begin(), u.end());
        db.insert(db.end(), dn.begin(), dn.end());
        if (tested) {
          ref.experts[static_cast<size_t>(e)].gate_bias = widen(g);
          ref.experts[static_cast<size_t>(e)].up_bias = widen(u);
          ref.experts[static_cast<size_t>(e)].down_bias = widen(dn);
        }
      }
      add(p + "ffn_gate_exps.bias", {ff, E}, ggml_type::F32, f32_bytes(gb), layer);
      add(p + "ffn_up_exps.bias", {ff, E}, ggml_type::F32, f32_bytes(ub), layer);
      add(p + "ffn_down_exps.bias", {d, E}, ggml_type::F32, f32_bytes(db), layer);
    }
    if (shared > 0) {
      RefFfn s{shared_ff, {}, {}, {}, {}, {}, {}};
      const std::vector<float> g = tested ? rand(shared_ff * d, in_bound) : zeros(shared_ff * d);
      const std::vector<float> u = tested ? rand(shared_ff * d, in_bound) : zeros(shared_ff * d);
      const std::vector<float> dn =
          tested ? rand(d * shared_ff, 1 / std::sqrt(static_cast<double>(shared_ff))) : zeros(d * shared_ff);
      add(p + "ffn_gate_shexp.weight", {d, shared_ff}, c.type, encode(g, shared_ff, d, c.type, &s.gate),
          layer);
      add(p + "ffn_up_shexp.weight", {d, shared_ff}, c.type, encode(u, shared_ff, d, c.type, &s.up), layer);
      add(p + "ffn_down_shexp.weight", {shared_ff, d}, c.down_type,
          encode(dn, d, shared_ff, c.down_type, &s.down), layer);
      if (tested) ref.shared = s;
      if (a == "qwen2moe") {
        const std::vector<float> sg = rand(d, in_bound);
        add(p + "ffn_gate_inp_shexp.weight", {d}, ggml_type::F32, f32_bytes(sg), layer);
        if (tested) ref.shared_gate = widen(sg);
      }
    }
    if (mtp) add(p + "nextn.enorm.weight", {d}, ggml_type::F32, f32_bytes(zeros(d)), layer);
  }
  if (edit) edit(w);
  if (c.shards > 1) {
    out.dir = w.write_split(dir, "tiny-" + c.name, c.shards, shard_of);
  } else {
    out.dir = dir / ("tiny-" + c.name + ".gguf");
    w.write(out.dir);
  }
  return out;
}

}  // namespace moe::testing
