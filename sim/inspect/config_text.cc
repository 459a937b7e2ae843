#include "sim/inspect/config_text.h"

#include <sstream>

namespace moe::sim {

std::string scoring_text(const io::PretrainedConfig& c) {
  const RouterConfig& r = c.router;
  std::ostringstream s;
  switch (r.scoring) {
    case Scoring::kSoftmax:
      s << "softmax over all " << r.num_experts << " experts";
      break;
    case Scoring::kSigmoid:
      s << "sigmoid scores";
      break;
    case Scoring::kSoftmaxTopK:
      s << "weights: a softmax over the " << r.top_k << " chosen logits";
      break;
  }
  if (c.layer.router_bias) s << "; logits with the router's bias";
  s << "; top-" << r.top_k << " by " << (r.rank_by_logit ? "logit" : "score");
  if (c.layer.score_bias) {
    s << " + " << (c.format == io::CheckpointFormat::kGguf ? "exp_probs_b" : "e_score_correction_bias")
      << " (chooses, never weighs)";
  }
  if (r.num_groups > 1) {
    s << "; " << r.num_groups << " groups, " << r.topk_groups << " kept (a group's value: "
      << (r.group_score == GroupScore::kMax ? "its best score" : "the sum of its two best") << ")";
  }
  if (r.scoring != Scoring::kSoftmaxTopK) s << (r.renormalize ? "; renormalised" : "; not renormalised");
  if (r.scaling_factor != 1.0f) s << "; x " << r.scaling_factor;
  if (c.weight_on_input) s << "; the weight scales the expert's input (Llama 4)";
  return s.str();
}

std::string expert_text(const io::PretrainedConfig& c) {
  std::ostringstream s;
  if (c.activation == kernels::Activation::kClampedSwiGLU) {
    s << "clamped SwiGLU (clamp(up, -" << c.swiglu_limit << ", " << c.swiglu_limit << ") + 1) * g * sigmoid("
      << c.swiglu_alpha << " g), g = min(gate, " << c.swiglu_limit << "); biases on gate, up and down";
  } else {
    s << "SwiGLU down(silu(gate x) * up x)";
  }
  return s.str();
}

std::string layer_text(const io::PretrainedConfig& c) {
  const io::LayerShape& s = c.layer;
  std::ostringstream out;
  out << "hidden " << s.hidden << ", " << s.num_experts << " routed experts of " << s.expert_ff << " ("
      << c.expert_ff_key << "), top-" << c.router.top_k;
  if (s.num_shared_experts > 0) {
    out << ", shared expert of " << s.shared_ff;
    if (c.architecture == io::Architecture::kDeepseekV2 || c.architecture == io::Architecture::kDeepseekV3 ||
        c.architecture == io::Architecture::kGlm4Moe) {
      out << " (" << s.num_shared_experts << " fused)";
    }
    if (s.shared_expert_gate) out << " behind a sigmoid gate";
  }
  return out.str();
}

std::string layers_text(const io::PretrainedConfig& c) {
  std::ostringstream out;
  out << c.num_layers;
  if (c.num_extra_layers > 0) out << " (+ " << c.num_extra_layers << " MTP after the last)";
  out << "; MoE " << c.moe_layer_list() << " (" << c.moe_layers.size() << "), dense MLP "
      << c.num_layers - static_cast<int>(c.moe_layers.size());
  return out.str();
}

}  // namespace moe::sim
