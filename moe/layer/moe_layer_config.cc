#include "moe/layer/moe_layer_config.h"

#include <xxhash.h>

#include <cmath>
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
  if (activation == kernels::Activation::kClampedSwiGLU &&
      (!std::isfinite(swiglu_limit) || swiglu_limit <= 0.0f || !std::isfinite(swiglu_alpha))) {
    throw std::invalid_argument(
        "moe layer config: swiglu_limit must be finite and > 0 and swiglu_alpha finite (got " +
        std::to_string(swiglu_limit) + ", " + std::to_string(swiglu_alpha) + ")");
  }
  if (max_tokens < 1) {
    throw std::invalid_argument("moe layer config: max_tokens must be >= 1 (got " +
                                std::to_string(max_tokens) + ")");
  }
}

RouterConfig MoELayerConfig::router_for(io::Architecture arch) {
  return RouterConfig::preset(io::to_string(arch));
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
  std::string known;
  for (const auto& n : RouterConfig::preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown router '" + std::string(name) + "' (known: " + known + ")");
}

MoELayerConfig MoELayerConfig::preset(std::string_view preset_name, io::Architecture arch) {
  MoELayerConfig c;
  c.router = router_for(arch);
  if (arch == io::Architecture::kGptOss) c.activation = kernels::Activation::kClampedSwiGLU;
  c.weight_on_input = arch == io::Architecture::kLlama4;
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
  c.router = config.router;
  c.activation = config.activation;
  c.swiglu_alpha = config.swiglu_alpha;
  c.swiglu_limit = config.swiglu_limit;
  c.weight_on_input = config.weight_on_input;
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

std::string MoELayerConfig::preset_description(std::string_view preset_name) {
  const MoELayerConfig c = preset(preset_name, io::Architecture::kMixtral);
  const DispatchPolicy& p = c.policy;
  std::ostringstream cf;
  cf << p.capacity_factor;
  const std::string rules = describe_rules(p) + ", capacity factor " + cf.str() + ", " +
                            std::string(kernels::to_string(c.expert_kernel)) + " kernels";
  // What the rules give; kept beside preset(), which sets them.
  const std::string_view guarantee =
      preset_name == "deterministic"
          ? "a request's output is bitwise independent of the rest of the batch, of the thread count, of "
            "how its prompt is chunked, of prefix caching, preemption and speculative decoding"
          : "what production engines do: a request's drops and bits depend on who shares its batches";
  return rules + ": " + std::string(guarantee);
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

kernels::FfnWeights expert_ffn_weights(const io::ExpertTensors& t, const MoELayerConfig& config) {
  kernels::FfnWeights w;
  const bool gated = kernels::is_gated(config.activation);
  w.w1 = gated ? t.gate_proj : t.up_proj;
  w.w3 = gated ? t.up_proj : kernels::MatrixView{};
  w.w2 = t.down_proj;
  if (!t.gate_bias.empty()) {
    w.b1 = gated ? t.gate_bias.data() : t.up_bias.data();
    w.b3 = gated ? t.up_bias.data() : nullptr;
    w.b2 = t.down_bias.data();
  }
  w.swiglu_alpha = config.swiglu_alpha;
  w.swiglu_limit = config.swiglu_limit;
  return w;
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
    << " activation=" << to_string(activation);
  // Fields added after the first version are written only when they differ from the default, so that the
  // hashes of the configs that could be written before stay what they were.
  if (activation == kernels::Activation::kClampedSwiGLU) {
    s << " swiglu_alpha=" << swiglu_alpha << " swiglu_limit=" << swiglu_limit;
  }
  if (router.rank_by_logit) s << " rank_by_logit=1";
  if (router.group_score != GroupScore::kTopTwoSum) s << " group_score=" << to_string(router.group_score);
  if (weight_on_input) s << " weight_on_input=1";
  if (compute != kernels::ComputePrecision::kF32) s << " compute=" << to_string(compute);
  return s.str();
}

uint64_t MoELayerConfig::config_hash() const {
  const std::string d = describe();
  return XXH3_64bits(d.data(), d.size());
}

}  // namespace moe
