#include "moe/api/builders.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>

#include "moe/api/layer_factory.h"
#include "router/dispatch_policy.h"
#include "router/router_config.h"

namespace moe::api {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument(msg);
}

}  // namespace

io::LayerWeights weights_from_buffers(const io::LayerShape& shape, const WeightBuffers& b) {
  shape.validate();
  if (b.dtype != kernels::DType::kF32 && b.dtype != kernels::DType::kBF16) {
    fail("weight buffers: dtype must be f32 or bf16");
  }
  const size_t E = static_cast<size_t>(shape.num_experts);
  const int64_t d = shape.hidden, ff = shape.expert_ff, sff = shape.shared_ff;
  if (b.router_gate == nullptr) fail("weight buffers: router_gate is required");
  if (shape.score_bias != (b.score_bias != nullptr)) {
    fail(shape.score_bias ? "weight buffers: score_bias is required (shape.score_bias is set)"
                          : "weight buffers: score_bias given but shape.score_bias is not set");
  }
  if (b.gate_proj.size() != E || b.up_proj.size() != E || b.down_proj.size() != E) {
    fail("weight buffers: expected " + std::to_string(E) + " expert pointers for each projection");
  }
  for (size_t e = 0; e < E; ++e) {
    if (!b.gate_proj[e] || !b.up_proj[e] || !b.down_proj[e]) {
      fail("weight buffers: expert " + std::to_string(e) + " has a null gate/up/down pointer");
    }
  }
  const bool has_shared = shape.num_shared_experts > 0;
  const bool any_shared = b.shared_gate_proj || b.shared_up_proj || b.shared_down_proj;
  if (has_shared && !(b.shared_gate_proj && b.shared_up_proj && b.shared_down_proj)) {
    fail(
        "weight buffers: the shape has a shared expert: shared_gate_proj, shared_up_proj and "
        "shared_down_proj are "
        "required");
  }
  if (!has_shared && any_shared)
    fail("weight buffers: shared expert buffers given but num_shared_experts is 0");
  if (shape.shared_expert_gate != (b.shared_expert_gate != nullptr)) {
    fail(shape.shared_expert_gate
             ? "weight buffers: shared_expert_gate is required (shape.shared_expert_gate is set)"
             : "weight buffers: shared_expert_gate given but shape.shared_expert_gate is not set");
  }

  auto view = [](const void* p, int64_t rows, int64_t cols, kernels::DType dtype) {
    return kernels::MatrixView{p, dtype, rows, cols, cols};
  };
  io::LayerViews views;
  views.router_gate = view(b.router_gate, shape.num_experts, d, kernels::DType::kF32);
  if (shape.score_bias) views.score_bias = std::span<const float>(b.score_bias, E);
  for (size_t e = 0; e < E; ++e) {
    views.experts.push_back(io::ExpertTensors{view(b.gate_proj[e], ff, d, b.dtype),
                                              view(b.up_proj[e], ff, d, b.dtype),
                                              view(b.down_proj[e], d, ff, b.dtype)});
  }
  if (has_shared) {
    views.shared =
        io::ExpertTensors{view(b.shared_gate_proj, sff, d, b.dtype), view(b.shared_up_proj, sff, d, b.dtype),
                          view(b.shared_down_proj, d, sff, b.dtype)};
  }
  if (shape.shared_expert_gate) views.shared_gate = view(b.shared_expert_gate, 1, d, kernels::DType::kF32);
  if (shape.router_bias != (b.router_bias != nullptr)) {
    fail(shape.router_bias ? "weight buffers: router_bias is required (shape.router_bias is set)"
                           : "weight buffers: router_bias given but shape.router_bias is not set");
  }
  if (shape.router_bias) views.router_bias = std::span<const float>(b.router_bias, E);
  const bool any_expert_bias = !b.gate_bias.empty() || !b.up_bias.empty() || !b.down_bias.empty();
  if (shape.expert_bias != any_expert_bias) {
    fail(shape.expert_bias
             ? "weight buffers: gate_bias, up_bias and down_bias are required (shape.expert_bias "
               "is set)"
             : "weight buffers: expert biases given but shape.expert_bias is not set");
  }
  if (shape.expert_bias) {
    if (b.gate_bias.size() != E || b.up_bias.size() != E || b.down_bias.size() != E) {
      fail("weight buffers: expected " + std::to_string(E) + " expert bias pointers for each projection");
    }
    for (size_t e = 0; e < E; ++e) {
      if (!b.gate_bias[e] || !b.up_bias[e] || !b.down_bias[e]) {
        fail("weight buffers: expert " + std::to_string(e) + " has a null bias pointer");
      }
      views.experts[e].gate_bias = std::span<const float>(b.gate_bias[e], static_cast<size_t>(ff));
      views.experts[e].up_bias = std::span<const float>(b.up_bias[e], static_cast<size_t>(ff));
      views.experts[e].down_bias = std::span<const float>(b.down_bias[e], static_cast<size_t>(d));
    }
  }
  return io::weights_from_views(shape, views, b.dtype, io::Ownership::kCopy);
}

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

}  // namespace

void LayerOptions::set_preset(const std::string& name) {
  const auto& known = MoELayerConfig::preset_names();
  if (std::find(known.begin(), known.end(), name) == known.end()) {
    std::string list;
    for (const std::string& n : known) list += (list.empty() ? "" : ", ") + n;
    fail("unknown preset '" + name + "' (known: " + list + ")");
  }
  preset = name;
}
void LayerOptions::set_router(const std::string& name) {
  MoELayerConfig::router_named(name);  // throws for an unknown name
  router = name;
}
void LayerOptions::set_top_k(int k) {
  require(k >= 1, "top_k must be >= 1 (got " + std::to_string(k) + ")");
  top_k = k;
}
void LayerOptions::set_renormalize(int on) {
  require(on == 0 || on == 1, "renormalize must be 0 or 1 (got " + std::to_string(on) + ")");
  renormalize = on == 1;
}
void LayerOptions::set_num_groups(int groups) {
  require(groups >= 1, "num_groups must be >= 1 (got " + std::to_string(groups) + ")");
  num_groups = groups;
}
void LayerOptions::set_topk_groups(int kept) {
  require(kept >= 1, "topk_groups must be >= 1 (got " + std::to_string(kept) + ")");
  topk_groups = kept;
}
void LayerOptions::set_capacity_factor(double cf) {
  DispatchPolicy::check_capacity_factor(cf);
  capacity_factor = cf;
}
void LayerOptions::set_min_capacity(int n) {
  require(n >= 0, "min_capacity must be >= 0 (got " + std::to_string(n) + ")");
  min_capacity = n;
}
void LayerOptions::set_scope(const std::string& name) {
  scope = parse_capacity_scope(name);
}
void LayerOptions::set_priority(const std::string& name) {
  priority = parse_priority(name);
}
void LayerOptions::set_overflow(const std::string& name) {
  overflow = parse_overflow(name);
}
void LayerOptions::set_lookahead(int64_t positions) {
  require(positions >= 0 && positions <= UINT32_MAX,
          "lookahead must be in [0, 2^32) (got " + std::to_string(positions) + ")");
  lookahead = static_cast<uint32_t>(positions);
}

void LayerOptions::set_reroute_depth(int depth) {
  require(depth >= 1, "reroute_depth must be >= 1 (got " + std::to_string(depth) + ")");
  reroute_depth = depth;
}
void LayerOptions::set_kernel(const std::string& name) {
  if (name == "invariant") {
    kernel = kernels::KernelKind::kInvariant;
  } else if (name == "fast") {
    kernel = kernels::KernelKind::kFast;
  } else {
    fail("unknown kernel '" + name + "' (known: invariant, fast)");
  }
}
void LayerOptions::set_compute(const std::string& name) {
  compute = MoELayerConfig::parse_compute(name);
}
void LayerOptions::set_num_threads(int n) {
  require(n >= 1, "num_threads must be >= 1 (got " + std::to_string(n) + ")");
  num_threads = n;
}
void LayerOptions::set_max_tokens(int n) {
  require(n >= 1, "max_tokens must be >= 1 (got " + std::to_string(n) + ")");
  max_tokens = n;
}
void LayerOptions::set_device(const std::string& name) {
  check_device_name(name);
  device = name.empty() ? "cpu" : name;
}

LayerOptions pretrained_options(LayerOptions o, const io::PretrainedConfig& config) {
  o.router = std::string(io::to_string(config.architecture));
  o.pretrained = std::make_shared<const io::PretrainedConfig>(config);
  return o;
}

void LayerOptions::set_expert_parallel(const std::string& backend, const std::string& planning) {
  ExpertParallelSpec::check(backend, planning);
  expert_parallel.backend = backend;
  expert_parallel.planning = planning;
}

void LayerOptions::set_expert_placement(std::vector<int32_t> physical_to_logical) {
  for (size_t s = 0; s < physical_to_logical.size(); ++s) {
    if (physical_to_logical[s] < 0) {
      throw std::invalid_argument("expert placement: slot " + std::to_string(s) + " holds expert " +
                                  std::to_string(physical_to_logical[s]));
    }
  }
  expert_parallel.physical_to_logical = std::move(physical_to_logical);
}

MoELayerConfig make_config(const LayerOptions& o, const io::LayerWeights& weights) {
  return make_config(o, weights.shape().num_experts);
}

MoELayerConfig make_config(const LayerOptions& o, int num_experts) {
  MoELayerConfig c;
  if (o.pretrained) {
    c = MoELayerConfig::pretrained(o.preset, *o.pretrained);
  } else {
    // An architecture's name brings its expert semantics (gpt-oss, Llama 4); a router preset's only a router.
    std::optional<io::Architecture> arch;
    try {
      arch = io::parse_architecture(o.router);
    } catch (const std::invalid_argument&) {
    }
    c = MoELayerConfig::preset(o.preset, arch.value_or(io::Architecture::kMixtral));
    c.router = MoELayerConfig::router_named(o.router);
  }
  c.router.num_experts = num_experts;
  if (o.top_k) {
    c.router.top_k = *o.top_k;
  } else if (c.router.top_k > c.router.num_experts) {
    c.router.top_k = c.router.num_experts;
  }
  if (o.renormalize) c.router.renormalize = *o.renormalize;
  if (o.num_groups) c.router.num_groups = *o.num_groups;
  if (o.topk_groups) c.router.topk_groups = *o.topk_groups;
  if (o.capacity_factor) c.policy.capacity_factor = *o.capacity_factor;
  if (o.min_capacity) c.policy.min_capacity = *o.min_capacity;
  if (o.scope) c.policy.scope = *o.scope;
  if (o.priority) c.policy.priority = *o.priority;
  if (o.overflow) c.policy.overflow = *o.overflow;
  if (o.reroute_depth) c.policy.reroute_depth = *o.reroute_depth;
  if (o.lookahead) c.policy.lookahead = *o.lookahead;
  if (o.kernel) c.expert_kernel = c.gate_kernel = *o.kernel;
  if (o.compute) c.compute = *o.compute;
  if (o.num_threads) c.num_threads = *o.num_threads;
  if (o.max_tokens) c.max_tokens = *o.max_tokens;
  c.validate();
  return c;
}

}  // namespace moe::api
