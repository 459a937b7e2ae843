#include "moe/io/pretrained.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/io/gguf_config.h"
#include "moe/io/gguf_layer.h"
#include "moe/io/io_error.h"

namespace moe::io {
namespace {

using nlohmann::json;

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Typed access to config.json keys; every error names the file and the key (`scope` prefixes nested keys,
// e.g. "text_config.").
class ConfigReader {
 public:
  ConfigReader(const json& j, std::string file, std::string scope = "")
      : j_(j), file_(std::move(file)), scope_(std::move(scope)) {}

  [[noreturn]] void fail(const std::string& what) const { throw std::invalid_argument(file_ + ": " + what); }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  std::string name(const char* key) const { return "'" + scope_ + key + "'"; }
  const json& at(const char* key) const { return j_.at(key); }

  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt, int64_t min = 1,
                  int64_t max = int64_t{1} << 40) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail("lacks " + name(key));
    }
    const json& v = j_.at(key);
    if (!v.is_number_integer()) fail(name(key) + " must be an integer (got " + v.dump() + ")");
    const int64_t x = v.get<int64_t>();
    if (x < min || x > max) {
      fail(name(key) + " = " + std::to_string(x) + " is out of range (" + std::to_string(min) + "-" +
           std::to_string(max) + ")");
    }
    return x;
  }
  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_number()) fail(name(key) + " must be a number (got " + v.dump() + ")");
    const double x = v.get<double>();
    if (!(x > 0) || !std::isfinite(x)) fail(name(key) + " = " + v.dump() + " must be > 0");
    return x;
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) fail(name(key) + " must be true or false (got " + v.dump() + ")");
    return v.get<bool>();
  }
  std::string text(const char* key, const char* fallback) const {
    if (!has(key)) {
      if (fallback) return fallback;
      fail("lacks " + name(key));
    }
    const json& v = j_.at(key);
    if (!v.is_string()) fail(name(key) + " must be a string (got " + v.dump() + ")");
    return v.get<std::string>();
  }
  std::vector<int64_t> integers(const char* key) const {
    std::vector<int64_t> out;
    if (!has(key)) return out;
    const json& v = j_.at(key);
    if (!v.is_array()) fail(name(key) + " must be a list of integers (got " + v.dump() + ")");
    for (const json& x : v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0) {
        fail(name(key) + " must be a list of non-negative integers (got " + v.dump() + ")");
      }
      out.push_back(x.get<int64_t>());
    }
    return out;
  }
  // A nested object (text_config, quantization_config), or nullopt when absent.
  std::optional<ConfigReader> object(const char* key) const {
    if (!has(key)) return std::nullopt;
    if (!j_.at(key).is_object()) fail(name(key) + " must be an object");
    return ConfigReader(j_.at(key), file_, scope_ + key + ".");
  }

 private:
  const json& j_;
  std::string file_;
  std::string scope_;
};

std::filesystem::path config_path(const std::filesystem::path& dir_or_config) {
  if (dir_or_config.filename() == "config.json") return dir_or_config;
  return dir_or_config / "config.json";
}

struct Family {
  const char* model_type;
  Architecture arch;
};
constexpr Family kFamilies[] = {
    {"mixtral", Architecture::kMixtral},        {"qwen2_moe", Architecture::kQwen2Moe},
    {"qwen3_moe", Architecture::kQwen3Moe},     {"olmoe", Architecture::kOlmoe},
    {"deepseek_v2", Architecture::kDeepseekV2}, {"deepseek_v3", Architecture::kDeepseekV3},
    {"glm4_moe", Architecture::kGlm4Moe},       {"gpt_oss", Architecture::kGptOss},
    {"llama4", Architecture::kLlama4},          {"llama4_text", Architecture::kLlama4},
};

// The keys every family shares: layer count, hidden size, activation, the decoder's.
void read_common(const ConfigReader& r, PretrainedConfig& c) {
  c.layer.hidden = r.integer("hidden_size");
  // Bounded before a list of the layers is built from it (no model has 2^16 layers).
  c.num_layers = static_cast<int>(r.integer("num_hidden_layers", std::nullopt, 1, 1 << 16));
  c.hidden_act = r.text("hidden_act", "silu");
  if (c.hidden_act != "silu") {
    r.fail(r.name("hidden_act") + " = '" + c.hidden_act + "' is not supported (the " +
           std::string(display_name(c.architecture)) + " experts this project runs use 'silu')");
  }
  c.vocab_size = static_cast<int>(r.integer("vocab_size"));
  c.num_heads = static_cast<int>(r.integer("num_attention_heads", 1));
  c.num_kv_heads = static_cast<int>(r.integer("num_key_value_heads", c.num_heads));
  if (c.layer.hidden % c.num_heads != 0 && !r.has("head_dim")) {
    r.fail("hidden_size (" + std::to_string(c.layer.hidden) + ") is not a multiple of num_attention_heads (" +
           std::to_string(c.num_heads) + ")");
  }
  c.head_dim = static_cast<int>(r.integer("head_dim", c.layer.hidden / c.num_heads));
  c.max_positions = static_cast<int>(r.integer("max_position_embeddings", int64_t{4096} * 32));
  c.rms_eps = r.number("rms_norm_eps", 1e-5);
  c.rope_theta = r.number("rope_theta", 1e6);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  if (r.has("sliding_window")) c.sliding_window = static_cast<int>(r.integer("sliding_window"));
  c.torch_dtype = r.text("torch_dtype", "");
}

// The routed experts' count and size, and top-k, under the family's key names.
void read_experts(const ConfigReader& r, PretrainedConfig& c, const char* experts_key, const char* ff_key) {
  c.experts_key = experts_key;
  c.expert_ff_key = ff_key;
  c.layer.num_experts = static_cast<int>(r.integer(experts_key, std::nullopt, 1, 1 << 20));
  c.layer.expert_ff = r.integer(ff_key);
  c.router.num_experts = c.layer.num_experts;
  c.router.top_k = static_cast<int>(r.integer("num_experts_per_tok", std::nullopt, 1, 1 << 20));
  if (c.router.top_k > c.layer.num_experts) {
    r.fail("num_experts_per_tok (" + std::to_string(c.router.top_k) + ") exceeds " + experts_key + " (" +
           std::to_string(c.layer.num_experts) + ")");
  }
}

void all_layers_moe(PretrainedConfig& c) {
  c.moe_layers.clear();
  for (int i = 0; i < c.num_layers; ++i) c.moe_layers.push_back(i);
}

// Qwen2-MoE / Qwen3-MoE: decoder_sparse_step and mlp_only_layers.
void qwen_layers(const ConfigReader& r, PretrainedConfig& c) {
  const int64_t step = r.integer("decoder_sparse_step", 1);
  const std::vector<int64_t> mlp_only = r.integers("mlp_only_layers");
  for (int64_t i : mlp_only) {
    if (i >= c.num_layers) {
      r.fail(r.name("mlp_only_layers") + " names layer " + std::to_string(i) + " but num_hidden_layers is " +
             std::to_string(c.num_layers));
    }
  }
  for (int i = 0; i < c.num_layers; ++i) {
    const bool dense = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
    if (!dense && (i + 1) % step == 0) c.moe_layers.push_back(i);
  }
}

// DeepSeek-V2/V3, GLM-4.5: first_k_dense_replace and moe_layer_freq.
void deepseek_layers(const ConfigReader& r, PretrainedConfig& c) {
  const int64_t first_moe = r.integer("first_k_dense_replace", 0, 0);
  const int64_t freq = r.integer("moe_layer_freq", 1);
  for (int i = 0; i < c.num_layers; ++i) {
    if (i >= first_moe && i % freq == 0) c.moe_layers.push_back(i);
  }
  c.num_extra_layers = static_cast<int>(r.integer("num_nextn_predict_layers", 0, 0));
}

// The group limit keys (n_group, topk_group) of DeepSeek-V2/V3 and GLM-4.5.
void read_groups(const ConfigReader& r, PretrainedConfig& c) {
  c.router.num_groups = static_cast<int>(r.integer("n_group", 1));
  c.router.topk_groups = static_cast<int>(r.integer("topk_group", 1));
  if (c.layer.num_experts % c.router.num_groups != 0) {
    r.fail(c.experts_key + " (" + std::to_string(c.layer.num_experts) + ") is not a multiple of n_group (" +
           std::to_string(c.router.num_groups) + ")");
  }
  if (c.router.topk_groups > c.router.num_groups) {
    r.fail("topk_group (" + std::to_string(c.router.topk_groups) + ") exceeds n_group (" +
           std::to_string(c.router.num_groups) + ")");
  }
}

// The fused shared experts of DeepSeek and GLM (n_shared_experts x moe_intermediate_size).
void read_fused_shared(const ConfigReader& r, PretrainedConfig& c) {
  c.layer.num_shared_experts = static_cast<int>(r.integer("n_shared_experts", 0, 0));
  c.layer.shared_ff = c.layer.expert_ff * c.layer.num_shared_experts;
}

void require_text(const ConfigReader& r, const char* key, const char* fallback, const char* supported,
                  const std::string& why) {
  const std::string v = r.text(key, fallback);
  if (v != supported) {
    r.fail(r.name(key) + " = '" + v + "' is not supported for this model_type (supported: '" + supported +
           "'; " + why + ")");
  }
}

void read_quantization(const ConfigReader& r, PretrainedConfig& c) {
  const std::optional<ConfigReader> q = r.object("quantization_config");
  if (!q) return;
  const std::string method = q->text("quant_method", nullptr);
  if (method == "fp8") {
    const std::string fmt = q->text("fmt", "e4m3");
    if (fmt != "e4m3") {
      q->fail(q->name("fmt") + " = '" + fmt + "' is not supported (FP8 weights are read as e4m3)");
    }
    c.quantization = Quantization::kFp8Block;
    const std::vector<int64_t> block = q->integers("weight_block_size");
    if (block.empty()) {
      q->fail(
          q->name("weight_block_size") +
          " is required: per-tensor or per-channel FP8 scales are not supported (supported: block scales, "
          "weight_scale_inv)");
    }
    if (block.size() != 2 || block[0] <= 0 || block[1] <= 0) {
      q->fail(q->name("weight_block_size") + " must be two positive integers");
    }
    c.fp8_block = {block[0], block[1]};
  } else if (method == "mxfp4") {
    if (c.architecture != Architecture::kGptOss) {
      q->fail(q->name("quant_method") +
              " = 'mxfp4' is supported for gpt_oss only (its *_blocks / *_scales "
              "expert tensors)");
    }
    c.quantization = Quantization::kMxfp4;
  } else {
    q->fail(q->name("quant_method") + " = '" + method +
            "' is not supported (supported: 'fp8' with weight_block_size - DeepSeek-V3, Kimi K2, Qwen3-FP8, "
            "GLM-4.5-FP8 - and 'mxfp4' - gpt-oss)");
  }
}

void read_family(const ConfigReader& r, PretrainedConfig& c) {
  RouterConfig& router = c.router;
  switch (c.architecture) {
    case Architecture::kMixtral:
      read_experts(r, c, "num_local_experts", "intermediate_size");
      router.scoring = Scoring::kSoftmax;
      router.renormalize = true;
      all_layers_moe(c);
      return;
    case Architecture::kQwen2Moe:
    case Architecture::kQwen3Moe:
      read_experts(r, c, "num_experts", "moe_intermediate_size");
      router.scoring = Scoring::kSoftmax;
      router.renormalize = r.boolean("norm_topk_prob", false);
      if (c.architecture == Architecture::kQwen2Moe) {
        c.layer.shared_ff = r.integer("shared_expert_intermediate_size", 0, 0);
        c.layer.num_shared_experts = c.layer.shared_ff > 0 ? 1 : 0;
        c.layer.shared_expert_gate = c.layer.shared_ff > 0;
      }
      qwen_layers(r, c);
      return;
    case Architecture::kOlmoe:
      read_experts(r, c, "num_experts", "intermediate_size");
      router.scoring = Scoring::kSoftmax;
      router.renormalize = r.boolean("norm_topk_prob", false);
      all_layers_moe(c);
      return;
    case Architecture::kDeepseekV2: {
      read_experts(r, c, "n_routed_experts", "moe_intermediate_size");
      read_fused_shared(r, c);
      require_text(r, "scoring_func", "softmax", "softmax", "DeepSeek-V2 scores with a softmax");
      const std::string method = r.text("topk_method", "greedy");
      read_groups(r, c);
      if (method == "greedy") {
        router.num_groups = router.topk_groups = 1;
      } else if (method == "group_limited_greedy") {
        router.group_score = GroupScore::kMax;
      } else {
        r.fail(r.name("topk_method") + " = '" + method +
               "' is not supported for deepseek_v2 (supported: 'greedy', 'group_limited_greedy')");
      }
      if (r.boolean("norm_topk_prob", false)) {
        r.fail(
            r.name("norm_topk_prob") +
            " = true is not supported for deepseek_v2: DeepSeek-V2's remote code then normalises without "
            "routed_scaling_factor while transformers ignores the key (published V2 checkpoints set false)");
      }
      router.scoring = Scoring::kSoftmax;
      router.renormalize = false;
      router.scaling_factor = static_cast<float>(r.number("routed_scaling_factor", 1.0));
      deepseek_layers(r, c);
      return;
    }
    case Architecture::kDeepseekV3:
    case Architecture::kGlm4Moe:
      read_experts(r, c, "n_routed_experts", "moe_intermediate_size");
      read_fused_shared(r, c);
      c.layer.score_bias = true;
      if (c.architecture == Architecture::kDeepseekV3) {
        require_text(r, "scoring_func", "sigmoid", "sigmoid", "DeepSeek-V3 scores with a sigmoid");
        require_text(r, "topk_method", "noaux_tc", "noaux_tc",
                     "DeepSeek-V3 chooses by the biased scores, e_score_correction_bias");
      }
      read_groups(r, c);
      router.scoring = Scoring::kSigmoid;
      router.renormalize =
          r.boolean("norm_topk_prob", true) && (c.architecture == Architecture::kGlm4Moe || router.top_k > 1);
      router.scaling_factor = static_cast<float>(r.number("routed_scaling_factor", 1.0));
      deepseek_layers(r, c);
      return;
    case Architecture::kGptOss:
      read_experts(r, c, "num_local_experts", "intermediate_size");
      c.layer.router_bias = true;
      c.layer.expert_bias = true;
      router.scoring = Scoring::kSoftmaxTopK;
      router.renormalize = true;
      router.rank_by_logit = true;
      c.activation = kernels::Activation::kClampedSwiGLU;
      c.swiglu_limit = static_cast<float>(r.number("swiglu_limit", 7.0));
      c.swiglu_alpha = static_cast<float>(r.number("swiglu_alpha", 1.702));
      all_layers_moe(c);
      return;
    case Architecture::kLlama4: {
      read_experts(r, c, "num_local_experts", "intermediate_size");
      c.layer.num_shared_experts = 1;
      c.layer.shared_ff = c.layer.expert_ff;
      router.scoring = Scoring::kSigmoid;
      router.renormalize = false;
      router.rank_by_logit = true;
      c.weight_on_input = true;
      if (r.has("moe_layers")) {
        for (int64_t i : r.integers("moe_layers")) {
          if (i >= c.num_layers) {
            r.fail(r.name("moe_layers") + " names layer " + std::to_string(i) + " but num_hidden_layers is " +
                   std::to_string(c.num_layers));
          }
          c.moe_layers.push_back(static_cast<int>(i));
        }
        std::sort(c.moe_layers.begin(), c.moe_layers.end());
        c.moe_layers.erase(std::unique(c.moe_layers.begin(), c.moe_layers.end()), c.moe_layers.end());
      } else {
        const int64_t step = r.integer("interleave_moe_layer_step", 1);
        for (int i = static_cast<int>(step) - 1; i < c.num_layers; i += static_cast<int>(step)) {
          c.moe_layers.push_back(i);
        }
      }
      return;
    }
  }
}

// The root of a family's tensor names (what precedes "layers.{i}." and "embed_tokens").
std::string name_root(const PretrainedConfig& c) {
  return c.model_type == "llama4" ? "language_model.model." : "model.";
}

std::string layer_block(const PretrainedConfig& c, int i) {
  const char* block = c.architecture == Architecture::kMixtral  ? "block_sparse_moe."
                      : c.architecture == Architecture::kLlama4 ? "feed_forward."
                                                                : "mlp.";
  return name_root(c) + "layers." + std::to_string(i) + "." + block;
}

}  // namespace

std::string_view to_string(Quantization q) {
  switch (q) {
    case Quantization::kNone:
      return "none";
    case Quantization::kFp8Block:
      return "fp8 (e4m3, block scales)";
    case Quantization::kMxfp4:
      return "mxfp4";
  }
  return "?";
}

std::string_view to_string(CheckpointFormat f) {
  return f == CheckpointFormat::kGguf ? "gguf" : "safetensors";
}

bool PretrainedConfig::is_moe_layer(int i) const {
  return std::binary_search(moe_layers.begin(), moe_layers.end(), i);
}

std::string PretrainedConfig::moe_layer_list() const {
  if (moe_layers.empty()) return "none";
  std::string out;
  for (size_t i = 0; i < moe_layers.size();) {
    size_t j = i;
    while (j + 1 < moe_layers.size() && moe_layers[j + 1] == moe_layers[j] + 1) ++j;
    if (!out.empty()) out.append(", ");
    out.append(std::to_string(moe_layers[i]));
    if (j > i) {
      out.push_back('-');
      out.append(std::to_string(moe_layers[j]));
    }
    i = j + 1;
  }
  return out;
}

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> t;
    for (const Family& f : kFamilies) t.emplace_back(f.model_type);
    return t;
  }();
  return types;
}

std::filesystem::path pretrained_dir(const std::filesystem::path& dir_or_config) {
  return config_path(dir_or_config).parent_path();
}

PretrainedConfig read_pretrained_config(const std::filesystem::path& dir) {
  if (is_gguf_path(dir)) return read_gguf_config(GgufModel(dir));
  const std::filesystem::path path = config_path(dir);
  std::ifstream f(path);
  if (!f) throw IoError("cannot open " + path.string() + " (a checkpoint directory needs config.json)");
  std::stringstream ss;
  ss << f.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    throw std::invalid_argument(path.string() + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw std::invalid_argument(path.string() + ": not a JSON object");
  const ConfigReader top(j, path.string());

  PretrainedConfig c;
  c.model_type = top.text("model_type", nullptr);
  const Family* family = nullptr;
  for (const Family& fam : kFamilies) {
    if (c.model_type == fam.model_type) family = &fam;
  }
  if (family == nullptr) {
    std::string known;
    for (const std::string& t : supported_model_types()) known += (known.empty() ? "" : ", ") + t;
    top.fail("model_type '" + c.model_type + "' is not supported (supported: " + known + ")");
  }
  c.architecture = family->arch;
  // Llama 4's multimodal checkpoints keep the text model's keys in text_config.
  const std::optional<ConfigReader> text =
      c.model_type == "llama4" ? top.object("text_config") : std::nullopt;
  if (c.model_type == "llama4" && !text) {
    top.fail("lacks 'text_config' (model_type llama4 keeps the language model's keys there)");
  }
  const ConfigReader& r = text ? *text : top;
  read_common(r, c);
  read_family(r, c);
  read_quantization(top, c);
  c.router.selection_bias.clear();
  try {
    c.layer.validate_for(c.architecture);
    c.router.validate();
  } catch (const std::invalid_argument& e) {
    r.fail(e.what());
  }
  if (c.moe_layers.empty())
    r.fail("describes no MoE layer (num_hidden_layers = " + std::to_string(c.num_layers) + ")");
  return c;
}

void check_pretrained(const PretrainedConfig& c, const Checkpoint& ckpt) {
  const int64_t d = c.layer.hidden;
  const std::string ff_key = c.expert_ff_key, e_key = c.experts_key;
  auto mismatch = [&](const std::string& key, int64_t value, const std::string& tensor,
                      const std::vector<int64_t>& got, const std::vector<int64_t>& want) {
    throw std::invalid_argument("config.json says " + key + " = " + std::to_string(value) + " but " + tensor +
                                " has shape " + shape_text(got) + " (expected " + shape_text(want) + ") in " +
                                ckpt.path().string());
  };
  auto need = [&](const std::string& name, const std::string& why) -> RawTensor {
    const std::optional<RawTensor> t = ckpt.raw(name);
    if (!t) {
      throw std::invalid_argument("config.json says " + why + " but " + ckpt.path().string() + " lacks " +
                                  name);
    }
    return *t;
  };
  const std::string embed_name = name_root(c) + "embed_tokens.weight";
  if (ckpt.contains(embed_name)) {
    const std::vector<int64_t>& embed = *need(embed_name, "").shape;
    if (embed.size() != 2 || embed[1] != d) mismatch("hidden_size", d, embed_name, embed, {c.vocab_size, d});
    if (embed[0] != c.vocab_size) mismatch("vocab_size", c.vocab_size, embed_name, embed, {c.vocab_size, d});
  }
  const bool fused = c.architecture == Architecture::kGptOss || c.architecture == Architecture::kLlama4;
  const int64_t E = c.layer.num_experts, ff = c.layer.expert_ff;
  for (int i : c.moe_layers) {
    const std::string p = layer_block(c, i);
    const std::string layers = "layer " + std::to_string(i) + " is an MoE layer";
    const std::string gate_name = p + (fused ? "router.weight" : "gate.weight");
    const std::vector<int64_t> gate = *need(gate_name, layers).shape;
    const std::vector<int64_t> gate_want = {E, d};
    if (gate.size() != 2 || gate[1] != d) mismatch("hidden_size", d, gate_name, gate, gate_want);
    if (gate[0] != E) mismatch(e_key, E, gate_name, gate, gate_want);
    if (fused) {
      const std::string gu = p + "experts.gate_up_proj";
      if (ckpt.contains(gu)) {
        const std::vector<int64_t> t = *need(gu, "").shape;
        const std::vector<int64_t> want = {E, d, 2 * ff};
        if (t.size() != 3 || t[0] != E) mismatch(e_key, E, gu, t, want);
        if (t[1] != d) mismatch("hidden_size", d, gu, t, want);
        if (t[2] != 2 * ff) mismatch(ff_key, ff, gu, t, want);
      } else {
        const std::string blocks = gu + "_blocks";
        const std::vector<int64_t> t = *need(blocks, e_key + " = " + std::to_string(E)).shape;
        const std::vector<int64_t> want = {E, 2 * ff, d / 32, 16};
        if (t.size() != 4 || t[0] != E) mismatch(e_key, E, blocks, t, want);
        if (t[1] != 2 * ff) mismatch(ff_key, ff, blocks, t, want);
        if (t[2] * 32 != d || t[3] != 16) mismatch("hidden_size", d, blocks, t, want);
      }
      continue;
    }
    const char* w1 = c.architecture == Architecture::kMixtral ? "w1.weight" : "gate_proj.weight";
    const std::string extra = p + "experts." + std::to_string(E) + "." + w1;
    if (ckpt.contains(extra)) {
      throw std::invalid_argument("config.json says " + e_key + " = " + std::to_string(E) + " but " +
                                  ckpt.path().string() + " has " + extra);
    }
    const std::string first = p + "experts.0." + w1;
    const std::vector<int64_t> t = *need(first, e_key + " = " + std::to_string(E)).shape;
    const std::vector<int64_t> want = {ff, d};
    if (t.size() != 2 || t[1] != d) mismatch("hidden_size", d, first, t, want);
    if (t[0] != ff) mismatch(ff_key, ff, first, t, want);
  }
  const int beyond_layer = c.num_layers + c.num_extra_layers;
  const std::string beyond = layer_block(c, beyond_layer);
  for (const char* probe : {"gate.weight", "router.weight", "gate_proj.weight"}) {
    if (ckpt.contains(beyond + probe)) {
      throw std::invalid_argument(
          "config.json says num_hidden_layers = " + std::to_string(c.num_layers) +
          (c.num_extra_layers ? " (+ " + std::to_string(c.num_extra_layers) + " num_nextn_predict_layers)"
                              : std::string()) +
          " but " + ckpt.path().string() + " has " + beyond + probe);
    }
  }
}

Pretrained open_pretrained(const std::filesystem::path& dir) {
  Pretrained p;
  if (is_gguf_path(dir)) {
    p.gguf = GgufModel::open(dir);
    p.config = read_gguf_config(*p.gguf);
    check_gguf(p.config, *p.gguf);
    return p;
  }
  p.config = read_pretrained_config(dir);
  p.checkpoint = Checkpoint::open(pretrained_dir(dir));
  check_pretrained(p.config, *p.checkpoint);
  return p;
}

LayerWeights load_pretrained_layer(const Pretrained& p, int layer_index,
                                   std::optional<kernels::DType> storage, const ExpertSet& experts) {
  const PretrainedConfig& c = p.config;
  const bool gguf = c.format == CheckpointFormat::kGguf;
  if (layer_index < 0 || layer_index >= c.num_layers) {
    const std::string says =
        gguf ? c.model_type + ".block_count = " + std::to_string(c.num_layers + c.num_extra_layers) +
                   (c.num_extra_layers > 0
                        ? " (of which " + std::to_string(c.num_extra_layers) + " MTP layers after the last)"
                        : std::string())
             : "config.json says num_hidden_layers = " + std::to_string(c.num_layers);
    throw std::invalid_argument("layer " + std::to_string(layer_index) + " is out of range: " + says + " (" +
                                p.path().string() + "; the MoE layers are " + c.moe_layer_list() + ")");
  }
  if (!c.is_moe_layer(layer_index)) {
    throw std::invalid_argument("layer " + std::to_string(layer_index) + " of " + p.path().string() +
                                " is a dense MLP layer, not an MoE layer; the MoE layers of this " +
                                c.model_type + " checkpoint are " + c.moe_layer_list());
  }
  if (gguf) return load_gguf_layer(p.gguf, c, layer_index, storage, experts);
  return load_layer(p.checkpoint, c.architecture, layer_index, c.layer, storage, c.fp8_block, experts);
}

LayerWeights load_pretrained_layer(const std::filesystem::path& dir, int layer_index,
                                   std::optional<kernels::DType> storage, const ExpertSet& experts) {
  return load_pretrained_layer(open_pretrained(dir), layer_index, storage, experts);
}

LayerPartReader pretrained_part_reader(Pretrained pretrained, int layer_index,
                                       std::optional<kernels::DType> storage) {
  return LayerPartReader([p = std::move(pretrained), layer_index, storage](const ExpertSet& experts) {
    return load_pretrained_layer(p, layer_index, storage, experts);
  });
}

}  // namespace moe::io
