#include "moe/io/gguf_config.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "moe/io/gguf_names.h"

namespace moe::io {
namespace {

struct ArchName {
  const char* name;
  Architecture arch;  // deepseek2 is refined by its gating function
};
constexpr ArchName kArchitectures[] = {
    {"llama", Architecture::kMixtral},        {"qwen2moe", Architecture::kQwen2Moe},
    {"qwen3moe", Architecture::kQwen3Moe},    {"olmoe", Architecture::kOlmoe},
    {"deepseek2", Architecture::kDeepseekV2}, {"glm4moe", Architecture::kGlm4Moe},
    {"gpt-oss", Architecture::kGptOss},       {"llama4", Architecture::kLlama4},
};

// llama_expert_gating_func_type.
constexpr int64_t kGatingSoftmax = 1, kGatingSigmoid = 2, kGatingSoftmaxWeight = 3;

std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Typed access to the architecture's metadata keys; every error names the file and the key.
class GgufKeys {
 public:
  GgufKeys(const GgufModel& m, std::string arch) : m_(m), arch_(std::move(arch)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument(m_.path().string() + ": " + what);
  }
  std::string key(const std::string& k) const { return arch_ + "." + k; }
  const GgufValue* find(const std::string& k) const { return m_.find(key(k)); }
  bool has(const std::string& k) const { return find(k) != nullptr; }

  // An integer key in [min, max], `fallback` when absent (fails when absent without one).
  int64_t integer(const std::string& k, std::optional<int64_t> fallback = std::nullopt, int64_t min = 1,
                  int64_t max = int64_t{1} << 40) const {
    const GgufValue* v = find(k);
    if (v == nullptr) {
      if (fallback) return *fallback;
      fail("lacks " + key(k) + " (a " + arch_ + " file needs it)");
    }
    const std::optional<int64_t> i = v->as_int();
    if (!i) fail(key(k) + " must be an integer (got " + v->describe() + ")");
    if (*i < min || *i > max) {
      fail(key(k) + " = " + std::to_string(*i) + " is out of range (" + std::to_string(min) + "-" +
           std::to_string(max) + ")");
    }
    return *i;
  }
  // A number (f32, f64 or an integer), `fallback` when absent.
  double number(const std::string& k, double fallback) const {
    const GgufValue* v = find(k);
    if (v == nullptr) return fallback;
    std::optional<double> d = v->as_float();
    if (!d && v->as_int()) d = static_cast<double>(*v->as_int());
    if (!d) fail(key(k) + " must be a number (got " + v->describe() + ")");
    if (!std::isfinite(*d)) fail(key(k) + " = " + number_text(*d) + " is not finite");
    return *d;
  }
  bool boolean(const std::string& k, bool fallback) const {
    const GgufValue* v = find(k);
    if (v == nullptr) return fallback;
    if (!v->as_bool()) fail(key(k) + " must be a bool (got " + v->describe() + ")");
    return *v->as_bool();
  }
  // A count stored as one integer or (llama.cpp's per-layer form) an array of them, one per layer: the
  // value of the MoE layers, which must agree.
  int64_t per_layer(const std::string& k, const std::vector<int>& layers,
                    std::optional<int64_t> fallback) const {
    const GgufValue* v = find(k);
    if (v == nullptr || v->type() != GgufValueType::kArray) return integer(k, fallback);
    std::optional<int64_t> value;
    for (int layer : layers) {
      if (static_cast<uint64_t>(layer) >= v->size()) {
        fail(key(k) + " has " + std::to_string(v->size()) + " values but layer " + std::to_string(layer) +
             " is an MoE layer");
      }
      const std::optional<int64_t> x = v->element(static_cast<uint64_t>(layer)).as_int();
      if (!x || *x < 1) fail(key(k) + "[" + std::to_string(layer) + "] must be a positive integer");
      if (value && *x != *value) {
        fail(key(k) + " differs between MoE layers (" + std::to_string(*value) + " and " +
             std::to_string(*x) + " at layer " + std::to_string(layer) +
             "); this project loads layers of one shape per model");
      }
      value = *x;
    }
    if (!value) fail(key(k) + " is an empty array");
    return *value;
  }
  // Refuses `k` when present with a value other than what llama.cpp's graph uses for this architecture.
  void require_number(const std::string& k, double used, const std::string& why) const {
    if (!has(k)) return;
    const double v = number(k, used);
    if (v != used) {
      fail(key(k) + " = " + number_text(v) + " is not supported for " + arch_ + " (" + why + ")");
    }
  }
  void require_bool(const std::string& k, bool used, const std::string& why) const {
    if (has(k) && boolean(k, used) != used) {
      fail(key(k) + " = " + (used ? "false" : "true") + " is not supported for " + arch_ + " (" + why + ")");
    }
  }
  void refuse(const std::string& k, const std::string& what) const {
    if (const GgufValue* v = find(k)) {
      fail(key(k) + " (" + v->describe() + ") is not supported: " + what);
    }
  }

  const std::string& arch() const { return arch_; }

 private:
  const GgufModel& m_;
  std::string arch_;
};

void all_layers_moe(PretrainedConfig& c) {
  c.moe_layers.clear();
  for (int i = 0; i < c.num_layers; ++i) c.moe_layers.push_back(i);
}

// The decoder's keys, read where present with a usable type (information only: nothing here decides what a
// layer computes).
void read_decoder(const GgufKeys& k, const GgufModel& m, PretrainedConfig& c) {
  auto optional_int = [&](const std::string& key, int64_t fallback) {
    const GgufValue* v = k.find(key);
    if (v == nullptr) return fallback;
    if (const auto i = v->as_int()) return *i;
    if (v->type() == GgufValueType::kArray && v->size() > 0) {  // per-layer arrays: the first layer's
      if (const auto i = v->element(0).as_int()) return *i;
    }
    return fallback;
  };
  auto optional_float = [&](const std::string& key, double fallback) {
    const GgufValue* v = k.find(key);
    if (v == nullptr) return fallback;
    if (const auto f = v->as_float()) return *f;
    return fallback;
  };
  int64_t vocab = optional_int("vocab_size", 0);
  if (vocab == 0) {
    if (const GgufValue* tokens = m.find("tokenizer.ggml.tokens"))
      vocab = static_cast<int64_t>(tokens->size());
  }
  if (vocab == 0) {
    if (const GgufTensorInfo* embd = m.tensor("token_embd.weight")) vocab = embd->ne[1];
  }
  c.vocab_size = static_cast<int>(std::clamp<int64_t>(vocab, 0, INT32_MAX));
  c.num_heads = static_cast<int>(std::clamp<int64_t>(optional_int("attention.head_count", 0), 0, INT32_MAX));
  c.num_kv_heads = static_cast<int>(
      std::clamp<int64_t>(optional_int("attention.head_count_kv", c.num_heads), 0, INT32_MAX));
  const int64_t head_dim = c.num_heads > 0 ? c.layer.hidden / c.num_heads : 0;
  c.head_dim =
      static_cast<int>(std::clamp<int64_t>(optional_int("attention.key_length", head_dim), 0, INT32_MAX));
  c.max_positions = static_cast<int>(std::clamp<int64_t>(optional_int("context_length", 0), 0, INT32_MAX));
  c.rms_eps = optional_float("attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_theta = optional_float("rope.freq_base", 1e4);
  const int64_t window = optional_int("attention.sliding_window", 0);
  if (window > 0 && window <= INT32_MAX) c.sliding_window = static_cast<int>(window);
  c.hidden_act = c.activation == kernels::Activation::kClampedSwiGLU ? "swiglu_oai" : "silu";
}

// The keys of semantics this project does not run: refused wherever they appear.
void refuse_unsupported(const GgufKeys& k) {
  k.refuse("expert_group_scale", "group-scaled routing weights are not implemented");
  k.refuse("experts_per_group", "expert groups of a fixed size other than expert_count / expert_group_count");
  k.refuse("moe_every_n_layers", "MoE layers every n layers are not implemented for GGUF files");
  k.refuse("swiglu_clamp_exp", "per-layer SwiGLU clamps of routed experts are not implemented");
  k.refuse("swiglu_clamp_shexp", "per-layer SwiGLU clamps of shared experts are not implemented");
  k.refuse("moe_latent_size", "latent MoE projections are not implemented");
  k.refuse("router_logit_softcapping", "router logit soft-capping is not implemented");
  k.refuse("expert_chunk_feed_forward_length", "chunked experts are not implemented");
}

// Keys a fixed-rule architecture's graph ignores: absent, or the value the graph uses.
void fixed_routing(const GgufKeys& k, int64_t gating, bool norm, const char* what) {
  if (k.has("expert_gating_func")) {
    const int64_t g = k.integer("expert_gating_func", std::nullopt, 0, 1 << 30);
    if (g != gating && g != 0) {
      k.fail(k.key("expert_gating_func") + " = " + std::to_string(g) + " is not supported for " + k.arch() +
             " (llama.cpp's " + k.arch() + " graph uses " + std::to_string(gating) + ": " + what + ")");
    }
  }
  k.require_bool("expert_weights_norm", norm,
                 std::string("llama.cpp's graph ") + (norm ? "always" : "never") + " renormalises " +
                     k.arch() + "'s top-k weights");
}

// expert_group_count / expert_group_used_count.
void read_groups(const GgufKeys& k, PretrainedConfig& c) {
  c.router.num_groups = static_cast<int>(k.integer("expert_group_count", 1, 1, 1 << 20));
  c.router.topk_groups =
      static_cast<int>(k.integer("expert_group_used_count", c.router.num_groups, 1, 1 << 20));
  if (c.layer.num_experts % c.router.num_groups != 0) {
    k.fail(k.key("expert_count") + " (" + std::to_string(c.layer.num_experts) + ") is not a multiple of " +
           k.key("expert_group_count") + " (" + std::to_string(c.router.num_groups) + ")");
  }
  if (c.router.topk_groups > c.router.num_groups) {
    k.fail(k.key("expert_group_used_count") + " (" + std::to_string(c.router.topk_groups) + ") exceeds " +
           k.key("expert_group_count") + " (" + std::to_string(c.router.num_groups) + ")");
  }
  if (c.router.topk_groups == c.router.num_groups) c.router.num_groups = c.router.topk_groups = 1;
}

void no_groups(const GgufKeys& k) {
  if (k.integer("expert_group_count", 1, 1, 1 << 20) > 1) {
    k.fail(k.key("expert_group_count") + " > 1 is not supported for " + k.arch() +
           " (group-limited routing is DeepSeek's and GLM's)");
  }
}

// deepseek2 / glm4moe: leading dense blocks, MTP layers after the last.
void deepseek_layers(const GgufKeys& k, PretrainedConfig& c, int64_t block_count) {
  c.num_extra_layers = static_cast<int>(k.integer("nextn_predict_layers", 0, 0, block_count - 1));
  c.num_layers = static_cast<int>(block_count) - c.num_extra_layers;
  const int64_t lead = k.integer("leading_dense_block_count", 0, 0, c.num_layers);
  c.moe_layers.clear();
  for (int i = static_cast<int>(lead); i < c.num_layers; ++i) c.moe_layers.push_back(i);
}

// The experts' intermediate size by llama.cpp's rule for qwen2moe / qwen3moe.
int64_t qwen_expert_ff(const GgufKeys& k, const PretrainedConfig& c) {
  if (k.has("expert_feed_forward_length")) return k.integer("expert_feed_forward_length");
  const int64_t ff = k.per_layer("feed_forward_length", c.moe_layers, std::nullopt);
  if (ff % c.router.top_k != 0) {
    k.fail("lacks " + k.key("expert_feed_forward_length") + " and " + k.key("feed_forward_length") + " (" +
           std::to_string(ff) + ") is not a multiple of " + k.key("expert_used_count") + " (" +
           std::to_string(c.router.top_k) + ")");
  }
  return ff / c.router.top_k;
}

void read_family(const GgufKeys& k, const GgufModel& m, PretrainedConfig& c, int64_t block_count) {
  RouterConfig& r = c.router;
  c.num_layers = static_cast<int>(block_count);
  switch (c.architecture) {
    case Architecture::kMixtral:
      all_layers_moe(c);
      c.layer.expert_ff = k.per_layer("feed_forward_length", c.moe_layers, std::nullopt);
      c.expert_ff_key = k.key("feed_forward_length");
      r.scoring = Scoring::kSoftmax;
      r.renormalize = true;
      fixed_routing(k, kGatingSoftmax, true, "softmax");
      k.require_number("expert_weights_scale", 1.0, "llama.cpp does not scale llama's routing weights");
      no_groups(k);
      return;
    case Architecture::kQwen2Moe: {
      all_layers_moe(c);
      c.layer.expert_ff = qwen_expert_ff(k, c);
      c.layer.num_shared_experts = 1;
      c.layer.shared_ff = k.has("expert_shared_feed_forward_length")
                              ? k.integer("expert_shared_feed_forward_length")
                              : k.per_layer("feed_forward_length", c.moe_layers, std::nullopt);
      c.layer.shared_expert_gate = true;
      r.scoring = Scoring::kSoftmax;
      r.renormalize = false;
      fixed_routing(k, kGatingSoftmax, false, "softmax");
      k.require_number("expert_weights_scale", 1.0, "llama.cpp does not scale qwen2moe's routing weights");
      no_groups(k);
      return;
    }
    case Architecture::kQwen3Moe:
      all_layers_moe(c);
      c.layer.expert_ff = qwen_expert_ff(k, c);
      r.scoring = Scoring::kSoftmax;
      r.renormalize = true;
      fixed_routing(k, kGatingSoftmax, true, "softmax");
      r.scaling_factor = static_cast<float>(k.number("expert_weights_scale", 1.0));
      no_groups(k);
      return;
    case Architecture::kOlmoe:
      all_layers_moe(c);
      c.layer.expert_ff = k.per_layer("feed_forward_length", c.moe_layers, std::nullopt);
      c.expert_ff_key = k.key("feed_forward_length");
      r.scoring = Scoring::kSoftmax;
      r.renormalize = false;
      fixed_routing(k, kGatingSoftmax, false, "softmax");
      k.require_number("expert_weights_scale", 1.0, "llama.cpp does not scale olmoe's routing weights");
      no_groups(k);
      return;
    case Architecture::kDeepseekV2:
    case Architecture::kGlm4Moe: {
      const bool glm = c.architecture == Architecture::kGlm4Moe;
      deepseek_layers(k, c, block_count);
      c.layer.expert_ff = k.integer("expert_feed_forward_length");
      c.layer.num_shared_experts = static_cast<int>(k.integer("expert_shared_count", 0, 0, 1 << 20));
      c.layer.shared_ff = c.layer.expert_ff * c.layer.num_shared_experts;
      const int64_t gating =
          k.integer("expert_gating_func", glm ? kGatingSigmoid : kGatingSoftmax, 0, 1 << 30);
      const bool norm = k.boolean("expert_weights_norm", false);
      r.scaling_factor = static_cast<float>(k.number("expert_weights_scale", 1.0));
      if (!(r.scaling_factor > 0)) {
        k.fail(k.key("expert_weights_scale") + " = " + number_text(r.scaling_factor) + " must be > 0");
      }
      read_groups(k, c);
      if (!glm && (gating == kGatingSoftmax || gating == 0)) {  // DeepSeek-V2
        if (m.tensor(GgufLayerNames(c.moe_layers.empty() ? 0 : c.moe_layers.front()).score_bias())) {
          k.fail("has exp_probs_b tensors with " + k.key("expert_gating_func") +
                 " softmax: DeepSeek-V2 routes without a selection bias (DeepSeek-V3 files have "
                 "expert_gating_func = 2, sigmoid)");
        }
        r.scoring = Scoring::kSoftmax;
        r.renormalize = norm;
        r.group_score = GroupScore::kMax;
        return;
      }
      if (gating != kGatingSigmoid) {
        k.fail(k.key("expert_gating_func") + " = " + std::to_string(gating) + " is not supported for " +
               k.arch() + " (supported: " +
               (glm ? "2 sigmoid"
                    : "1 softmax - DeepSeek-V2 - and 2 sigmoid - DeepSeek-V3, "
                      "Kimi K2") +
               ")");
      }
      if (!glm) c.architecture = Architecture::kDeepseekV3;
      c.layer.score_bias = true;
      r.scoring = Scoring::kSigmoid;
      r.renormalize = norm && (glm || r.top_k > 1);
      r.group_score = GroupScore::kTopTwoSum;
      return;
    }
    case Architecture::kGptOss:
      all_layers_moe(c);
      c.layer.expert_ff = k.integer("expert_feed_forward_length");
      c.layer.router_bias = true;
      c.layer.expert_bias = true;
      r.scoring = Scoring::kSoftmaxTopK;
      r.renormalize = true;
      r.rank_by_logit = true;
      c.activation = kernels::Activation::kClampedSwiGLU;
      c.swiglu_alpha = 1.702f;  // llama.cpp's swiglu_oai constants
      c.swiglu_limit = 7.0f;
      fixed_routing(k, kGatingSoftmaxWeight, false, "a softmax over the chosen logits");
      r.scaling_factor = static_cast<float>(k.number("expert_weights_scale", 1.0));
      no_groups(k);
      return;
    case Architecture::kLlama4: {
      const int64_t step = k.integer("interleave_moe_layer_step", 1, 1, block_count);
      c.moe_layers.clear();
      for (int i = static_cast<int>(step) - 1; i < c.num_layers; i += static_cast<int>(step))
        c.moe_layers.push_back(i);
      c.layer.expert_ff = k.integer("expert_feed_forward_length");
      c.layer.num_shared_experts = 1;
      c.layer.shared_ff = c.layer.expert_ff;
      r.scoring = Scoring::kSigmoid;
      r.renormalize = false;
      r.rank_by_logit = true;
      c.weight_on_input = true;
      fixed_routing(k, kGatingSigmoid, false, "sigmoid of the chosen logits");
      k.require_number("expert_weights_scale", 1.0, "llama.cpp does not scale llama4's routing weights");
      no_groups(k);
      return;
    }
    default:
      k.fail("internal: no GGUF rules for " + std::string(display_name(c.architecture)));
  }
}

std::string shape_text(const int64_t (&ne)[4], int n) {
  std::string s = "[";
  for (int d = 0; d < n; ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "]";
}

}  // namespace

const std::vector<std::string>& supported_gguf_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const ArchName& a : kArchitectures) v.emplace_back(a.name);
    return v;
  }();
  return names;
}

std::string llama_ftype_name(int64_t ftype) {
  struct Name {
    int64_t id;
    const char* name;
  };
  static constexpr Name kNames[] = {
      {0, "all F32"},        {1, "F16"},
      {2, "Q4_0"},           {3, "Q4_1"},
      {7, "Q8_0"},           {8, "Q5_0"},
      {9, "Q5_1"},           {10, "Q2_K - Medium"},
      {11, "Q3_K - Small"},  {12, "Q3_K - Medium"},
      {13, "Q3_K - Large"},  {14, "Q4_K - Small"},
      {15, "Q4_K - Medium"}, {16, "Q5_K - Small"},
      {17, "Q5_K - Medium"}, {18, "Q6_K"},
      {21, "Q2_K - Small"},  {32, "BF16"},
      {38, "MXFP4 MoE"},
  };
  for (const Name& n : kNames) {
    if (n.id == ftype) return n.name;
  }
  return "file type " + std::to_string(ftype);
}

PretrainedConfig read_gguf_config(const GgufModel& m) {
  const std::string where = m.path().string();
  const GgufValue* arch_value = m.find("general.architecture");
  if (arch_value == nullptr) throw std::invalid_argument(where + ": lacks general.architecture");
  const std::optional<std::string_view> arch = arch_value->as_string();
  if (!arch) {
    throw std::invalid_argument(where + ": general.architecture must be a string (got " +
                                arch_value->describe() + ")");
  }
  const ArchName* family = nullptr;
  for (const ArchName& a : kArchitectures) {
    if (*arch == a.name) family = &a;
  }
  if (family == nullptr) {
    std::string known;
    for (const std::string& n : supported_gguf_architectures()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument(where + ": general.architecture '" + gguf_printable(*arch) +
                                "' is not supported (supported MoE architectures: " + known + ")");
  }
  PretrainedConfig c;
  c.format = CheckpointFormat::kGguf;
  c.model_type = family->name;
  c.architecture = family->arch;
  const GgufKeys k(m, family->name);
  refuse_unsupported(k);
  if (!k.has("expert_count") || k.integer("expert_count", 0, 0) == 0) {
    k.fail("is a dense " + std::string(family->name) + " model (" + k.key("expert_count") +
           (k.has("expert_count") ? " = 0" : " is absent") + "): this project loads MoE layers only");
  }
  // Every block has tensors (its router or its dense MLP at least): a count above the tensors' is refused
  // before anything of its size exists.
  const int64_t block_count = k.integer("block_count", std::nullopt, 1, 1 << 20);
  if (static_cast<uint64_t>(block_count) > m.tensor_count()) {
    k.fail(k.key("block_count") + " = " + std::to_string(block_count) + " but the file has only " +
           std::to_string(m.tensor_count()) + " tensors");
  }
  c.layer.hidden = k.integer("embedding_length");
  c.layer.num_experts = static_cast<int>(k.integer("expert_count", std::nullopt, 1, 1 << 20));
  c.router.num_experts = c.layer.num_experts;
  c.router.top_k = static_cast<int>(k.integer("expert_used_count", std::nullopt, 1, 1 << 20));
  c.experts_key = k.key("expert_count");
  c.expert_ff_key = k.key("expert_feed_forward_length");
  if (c.router.top_k > c.layer.num_experts) {
    k.fail(k.key("expert_used_count") + " (" + std::to_string(c.router.top_k) + ") exceeds " +
           k.key("expert_count") + " (" + std::to_string(c.layer.num_experts) + ")");
  }
  read_family(k, m, c, block_count);
  read_decoder(k, m, c);
  if (const GgufValue* ft = m.find("general.file_type")) {
    if (const auto v = ft->as_int()) c.file_type = llama_ftype_name(*v);
  }
  c.torch_dtype.clear();
  try {
    c.layer.validate_for(c.architecture);
    c.router.validate();
  } catch (const std::invalid_argument& e) {
    k.fail(e.what());
  }
  if (c.moe_layers.empty()) {
    k.fail("describes no MoE layer (" + k.key("block_count") + " = " + std::to_string(block_count) + ")");
  }
  return c;
}

void check_gguf(const PretrainedConfig& c, const GgufModel& m) {
  const int64_t d = c.layer.hidden, E = c.layer.num_experts, ff = c.layer.expert_ff;
  const std::string where = m.path().string();
  auto shape_of = [](const GgufTensorInfo& t) { return t.shape_text(); };
  // The tensor `name` with ne `want` (trailing 1s may be left out, as llama.cpp's loader allows).
  auto expect = [&](const std::string& name, std::initializer_list<int64_t> want, const std::string& key,
                    int64_t value) {
    const GgufTensorInfo* t = m.tensor(name);
    if (t == nullptr) {
      throw std::invalid_argument(where + " lacks " + name + " (" + key + " = " + std::to_string(value) +
                                  " makes it an MoE layer of " + c.model_type + ")");
    }
    int64_t ne[4] = {1, 1, 1, 1};
    int n = 0;
    for (int64_t x : want) ne[n++] = x;
    if (!std::equal(ne, ne + 4, t->ne)) {
      throw std::invalid_argument(where + ": " + key + " = " + std::to_string(value) + " but " + name +
                                  " has shape " + shape_of(*t) + " (expected " + shape_text(ne, n) + ")");
    }
  };
  const std::string hidden_key = c.model_type + ".embedding_length";
  for (int layer : c.moe_layers) {
    const GgufLayerNames n(layer);
    const GgufTensorInfo* gate = m.tensor(n.router());
    if (gate == nullptr) {
      throw std::invalid_argument(where + " lacks " + n.router() + " (layer " + std::to_string(layer) +
                                  " is an MoE layer of this " + c.model_type + " file: the MoE layers are " +
                                  c.moe_layer_list() + ")");
    }
    if (gate->ne[0] != d) expect(n.router(), {d, E}, hidden_key, d);
    expect(n.router(), {d, E}, c.experts_key, E);
  }
  const GgufLayerNames n(c.moe_layers.front());
  if (m.tensor(n.gate_up_exps())) {
    expect(n.gate_up_exps(), {d, 2 * ff, E}, c.expert_ff_key, ff);
  } else if (m.tensor(n.gate_exps()) || c.architecture != Architecture::kMixtral ||
             !m.tensor(n.gate_expert(0))) {
    expect(n.gate_exps(), {d, ff, E}, c.expert_ff_key, ff);
    expect(n.up_exps(), {d, ff, E}, c.expert_ff_key, ff);
    expect(n.down_exps(), {ff, d, E}, c.expert_ff_key, ff);
  } else {  // Mixtral's per-expert tensors
    expect(n.gate_expert(0), {d, ff}, c.expert_ff_key, ff);
    if (m.tensor(n.gate_expert(static_cast<int>(E)))) {
      throw std::invalid_argument(where + ": " + c.experts_key + " = " + std::to_string(E) + " but it has " +
                                  n.gate_expert(static_cast<int>(E)));
    }
  }
  if (c.layer.num_shared_experts > 0) {
    const std::string key = c.architecture == Architecture::kQwen2Moe
                                ? c.model_type + ".expert_shared_feed_forward_length"
                                : c.model_type + ".expert_shared_count";
    const int64_t value =
        c.architecture == Architecture::kQwen2Moe ? c.layer.shared_ff : c.layer.num_shared_experts;
    expect(n.gate_shexp(), {d, c.layer.shared_ff}, key, value);
  }
  const GgufLayerNames beyond(c.num_layers + c.num_extra_layers);
  for (const std::string& probe : {beyond.router(), beyond.dense_gate()}) {
    if (m.tensor(probe)) {
      throw std::invalid_argument(where + ": " + c.model_type + ".block_count = " +
                                  std::to_string(c.num_layers + c.num_extra_layers) + " but it has " + probe);
    }
  }
}

}  // namespace moe::io
