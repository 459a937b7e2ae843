#include "moe/layer/moe_layer_config.h"

#include <xxhash.h>

#include <sstream>
#include <stdexcept>

namespace moe {

void MoELayerConfig::validate() const {
  router.validate();
  policy.validate();
  if (num_threads < 1) {
    throw std::invalid_argument("moe layer config: num_threads must be >= 1 (got " +
                                std::to_string(num_threads) + ")");
  }
  if (max_tokens < 1) {
    throw std::invalid_argument("moe layer config: max_tokens must be >= 1 (got " +
                                std::to_string(max_tokens) + ")");
  }
}

RouterConfig MoELayerConfig::router_for(io::Architecture arch) {
  switch (arch) {
    case io::Architecture::kMixtral:
      return RouterConfig::preset("mixtral");
    case io::Architecture::kQwen2Moe:
      return RouterConfig::preset("qwen2-moe");
    case io::Architecture::kDeepseekV3:
      return RouterConfig::preset("deepseek-v3");
    case io::Architecture::kOlmoe: {
      // OLMoE-1B-7B: softmax over 64 experts, top-8, norm_topk_prob = false.
      RouterConfig c = RouterConfig::preset("qwen2-moe");
      c.num_experts = 64;
      c.top_k = 8;
      return c;
    }
  }
  throw std::invalid_argument("moe layer config: unknown architecture");
}

RouterConfig MoELayerConfig::router_named(std::string_view name) {
  try {
    return router_for(io::parse_architecture(name));
  } catch (const std::invalid_argument&) {
  }
  try {
    return RouterConfig::preset(name);
  } catch (const std::invalid_argument&) {
  }
  throw std::invalid_argument("unknown router '" + std::string(name) +
                              "' (known: mixtral, qwen2-moe, deepseek-v3, olmoe, switch)");
}

MoELayerConfig MoELayerConfig::preset(std::string_view preset_name, io::Architecture arch) {
  MoELayerConfig c;
  c.router = router_for(arch);
  if (preset_name == "deterministic") {
    c.policy = DispatchPolicy::mode("stable");
    c.expert_kernel = kernels::KernelKind::kInvariant;
    c.gate_kernel = kernels::KernelKind::kInvariant;
  } else if (preset_name == "greedy") {
    c.policy = DispatchPolicy::mode("greedy");
    c.expert_kernel = kernels::KernelKind::kFast;
    c.gate_kernel = kernels::KernelKind::kFast;
  } else {
    throw std::invalid_argument("unknown layer preset '" + std::string(preset_name) +
                                "' (known: deterministic, greedy)");
  }
  return c;
}

MoELayerConfig MoELayerConfig::pretrained(std::string_view preset_name, const io::PretrainedConfig& config) {
  MoELayerConfig c = preset(preset_name, config.architecture);
  c.router.num_experts = config.layer.num_experts;
  c.router.top_k = config.top_k;
  c.router.renormalize = config.renormalize;
  c.validate();
  return c;
}

kernels::ComputePrecision MoELayerConfig::parse_compute(std::string_view name) {
  if (name == "fp32" || name == "float32" || name == "f32") return kernels::ComputePrecision::kF32;
  if (name == "bf16" || name == "bfloat16") return kernels::ComputePrecision::kBF16;
  throw std::invalid_argument("unknown compute precision '" + std::string(name) + "' (known: fp32, bf16)");
}

const std::vector<std::string>& MoELayerConfig::preset_names() {
  static const std::vector<std::string> names = {"deterministic", "greedy"};
  return names;
}

MoELayerConfig MoELayerConfig::fitted_to(const io::LayerWeights& weights) const {
  MoELayerConfig config = *this;
  config.validate();
  const io::LayerShape& shape = weights.shape();
  if (config.router.num_experts != shape.num_experts) {
    throw std::invalid_argument("moe layer config: the router has " +
                                std::to_string(config.router.num_experts) + " experts but the weights have " +
                                std::to_string(shape.num_experts));
  }
  if (config.router.top_k > kMaxTopK) {
    throw std::invalid_argument("moe layer config: top_k (" + std::to_string(config.router.top_k) +
                                ") exceeds the supported maximum " + std::to_string(kMaxTopK));
  }
  if (!weights.score_bias().empty()) {
    config.router.selection_bias.assign(weights.score_bias().begin(), weights.score_bias().end());
  }
  config.validate();
  return config;
}

kernels::FfnWeights expert_ffn_weights(const io::ExpertTensors& t, kernels::Activation activation) {
  if (activation == kernels::Activation::kGELU) return {t.up_proj, kernels::MatrixView{}, t.down_proj};
  return {t.gate_proj, t.up_proj, t.down_proj};
}

std::string MoELayerConfig::describe() const {
  std::ostringstream s;
  s.precision(17);
  s << "router{experts=" << router.num_experts << " top_k=" << router.top_k
    << " scoring=" << to_string(router.scoring) << " renormalize=" << router.renormalize
    << " scaling=" << router.scaling_factor << " groups=" << router.num_groups
    << " topk_groups=" << router.topk_groups << " bias=[";
  for (size_t e = 0; e < router.selection_bias.size(); ++e) s << (e ? "," : "") << router.selection_bias[e];
  s << "]} policy{cf=" << policy.capacity_factor << " rounding=" << to_string(policy.rounding)
    << " min_capacity=" << policy.min_capacity << " scope=" << to_string(policy.scope)
    << " priority=" << to_string(policy.priority) << " overflow=" << to_string(policy.overflow)
    << " reroute_depth=" << policy.reroute_depth << " seed=" << policy.seed
    << " renormalize_survivors=" << policy.renormalize_survivors;
  if (policy.scope == CapacityScope::kPrefix) s << " lookahead=" << policy.lookahead;
  s << "} expert_kernel=" << to_string(expert_kernel) << " gate_kernel=" << to_string(gate_kernel)
    << " activation=" << (activation == kernels::Activation::kSwiGLU ? "swiglu" : "gelu");
  if (compute != kernels::ComputePrecision::kF32) s << " compute=" << to_string(compute);
  return s.str();
}

uint64_t MoELayerConfig::config_hash() const {
  const std::string d = describe();
  return XXH3_64bits(d.data(), d.size());
}

}  // namespace moe
