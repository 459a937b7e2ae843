#include "moe/model/model_config.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace moe::model {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

std::string field(const char* name, int64_t value, const std::string& rule) {
  return std::string("ModelShape: ") + name + " (" + std::to_string(value) + ") " + rule;
}

}  // namespace

void ModelShape::validate() const {
  require(vocab_size >= 2, field("vocab_size", vocab_size, "must be at least 2"));
  require(hidden > 0, field("hidden", hidden, "must be positive"));
  require(num_layers > 0, field("num_layers", num_layers, "must be positive"));
  require(num_heads > 0, field("num_heads", num_heads, "must be positive"));
  require(hidden % num_heads == 0,
          field("hidden", hidden, "must be a multiple of num_heads (" + std::to_string(num_heads) + ")"));
  require(head_dim() % 2 == 0, field("head_dim", head_dim(), "must be even (rotary embedding)"));
  require(num_experts > 0, field("num_experts", num_experts, "must be positive"));
  require(top_k > 0, field("top_k", top_k, "must be positive"));
  require(top_k <= num_experts,
          field("top_k", top_k, "exceeds num_experts (" + std::to_string(num_experts) + ")"));
  require(expert_ff > 0, field("expert_ff", expert_ff, "must be positive"));
  require(max_positions > 0, field("max_positions", max_positions, "must be positive"));
  require(rms_eps > 0.0f, "ModelShape: rms_eps (" + std::to_string(rms_eps) + ") must be positive");
  require(rope_theta > 1.0f, "ModelShape: rope_theta (" + std::to_string(rope_theta) + ") must exceed 1");
}

ModelShape ModelShape::tiny() {
  ModelShape s;
  s.vocab_size = 128;
  s.hidden = 64;
  s.num_layers = 2;
  s.num_heads = 2;
  s.num_experts = 8;
  s.top_k = 2;
  s.expert_ff = 128;
  return s;
}

void ModelOptions::validate() const {
  policy.validate();
  require(max_tokens > 0, "ModelOptions: max_tokens (" + std::to_string(max_tokens) + ") must be positive");
}

MoELayerConfig ModelOptions::layer_config(const ModelShape& shape) const {
  MoELayerConfig c;
  c.router = RouterConfig::preset("mixtral");
  c.router.num_experts = shape.num_experts;
  c.router.top_k = shape.top_k;
  c.policy = policy;
  c.expert_kernel = kernel;
  c.gate_kernel = kernel;
  c.compute = compute;
  c.activation = kernels::Activation::kSwiGLU;
  c.num_threads = 1;
  c.max_tokens = max_tokens;
  c.validate();
  return c;
}

const std::vector<std::string>& ModelOptions::dispatch_mode_names() {
  static const std::vector<std::string> names = {"greedy",  "rank-only", "stable",  "sequence",
                                                 "request", "causal",    "dropless"};
  return names;
}

DispatchPolicy ModelOptions::dispatch_mode(std::string_view name, double capacity_factor) {
  DispatchPolicy p;
  if (name == "greedy" || name == "rank-only" || name == "stable") {
    p = DispatchPolicy::mode(name);
  } else if (name == "request") {
    p = DispatchPolicy::mode("stable");
    p.scope = CapacityScope::kRequest;
  } else if (name == "sequence") {
    p = DispatchPolicy::mode("stable");
    p.scope = CapacityScope::kSequence;
  } else if (name == "causal") {
    p = DispatchPolicy::mode("stable");
    p.scope = CapacityScope::kCausal;
  } else if (name == "dropless") {
    p = DispatchPolicy::mode("stable");
    p.scope = CapacityScope::kNone;
  } else {
    std::string known;
    for (const auto& n : dispatch_mode_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown dispatch mode '" + std::string(name) + "' (known: " + known + ")");
  }
  p.capacity_factor = capacity_factor;
  p.validate();
  return p;
}

}  // namespace moe::model
