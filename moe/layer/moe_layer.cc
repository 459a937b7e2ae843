#include "moe/layer/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cpu/bf16_packed.h"
#include "moe/layer/combine.h"
#include "moe/layer/expert_ffns.h"
#include "moe/layer/expert_schedule.h"
#include "router/rules/capacity.h"

namespace moe {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument("moe layer: " + msg);
}

std::vector<int> all_experts(const io::LayerWeights& weights) {
  std::vector<int> e(weights.experts().size());
  for (size_t i = 0; i < e.size(); ++i) e[i] = static_cast<int>(i);
  return e;
}

// The first 64-byte-aligned element of v (sized 32 elements past what it holds). The AMX kernel reads bf16
// rows in place as tiles: rows that start off a cache line make every tile row a split load.
uint16_t* aligned64(std::vector<uint16_t>& v) {
  uint16_t* p = v.data();
  while (reinterpret_cast<uintptr_t>(p) % 64 != 0) ++p;
  return p;
}

}  // namespace

std::unique_ptr<MoELayer> MoELayer::from_pretrained(const std::filesystem::path& dir, int layer_index,
                                                    std::string_view preset,
                                                    std::optional<kernels::DType> storage) {
  const io::Pretrained p = io::open_pretrained(dir);
  auto weights = std::make_shared<const io::LayerWeights>(io::load_pretrained_layer(p, layer_index, storage));
  return std::make_unique<MoELayer>(MoELayerConfig::pretrained(preset, p.config), std::move(weights));
}

namespace {
const io::LayerWeights& whole(const std::shared_ptr<const io::LayerWeights>& weights) {
  if (!weights) throw std::invalid_argument("MoELayer: weights must not be null");
  weights->require_all_experts("MoELayer");
  return *weights;
}
}  // namespace

MoELayer::MoELayer(MoELayerConfig config, std::shared_ptr<const io::LayerWeights> weights)
    : config_(config.fitted_to(whole(weights))),
      weights_(std::move(weights)),
      hidden_(weights_->shape().hidden),
      ffns_(std::make_unique<ExpertFfns>(config_, *weights_, all_experts(*weights_))),
      has_shared_(ffns_->has_shared()),
      pool_(config_.num_threads),
      router_(config_.router,
              rules::num_ranked_needed(config_.policy, config_.router.num_experts, config_.router.top_k)),
      planner_(config_.router.num_experts, config_.router.top_k, config_.policy) {
  active_experts_.reserve(config_.router.num_experts);
  ensure_workspace(config_.max_tokens);
  ffns_->release_mapped_sources();
}

MoELayer::~MoELayer() = default;

void MoELayer::ensure_workspace(int num_tokens) {
  if (num_tokens <= capacity_tokens_) return;
  const int E = num_experts(), k = top_k();
  const int64_t T = num_tokens;
  const int64_t slots = T * k;
  logits_.resize(T * E);
  routes_.resize(num_tokens, E, k, router_.num_ranked());
  planner_.reserve(num_tokens);
  plan_.reserve(num_tokens, k, E);
  if (ffns_->takes_rounded()) {  // + 32: room for a 64-byte-aligned start (aligned64)
    x_rounded_.resize(T * ffns_->rounded_row_elems() + 32);
    gathered_rounded_.resize(slots * ffns_->rounded_row_elems() + 32);
  } else {
    gathered_.resize(slots * hidden_);
  }
  expert_out_.resize(slots * hidden_);
  // An expert holds at most one pair per token, so at most T rows; experts run one per thread hold at most
  // kSmallExpertRows each.
  per_thread_scratch_ = ffns_->expert_scratch_floats(std::min<int64_t>(T, kSmallExpertRows));
  scratch_.resize(std::max({ffns_->expert_scratch_floats(T), ffns_->shared_scratch_floats(T),
                            per_thread_scratch_ * config_.num_threads}));
  if (has_shared_) {
    shared_out_.resize(T * hidden_);
    shared_gate_logit_.resize(T);
  }
  capacity_tokens_ = num_tokens;
}

size_t MoELayer::workspace_bytes() const {
  return (logits_.capacity() + gathered_.capacity() + expert_out_.capacity() + scratch_.capacity() +
          shared_out_.capacity() + shared_gate_logit_.capacity() + routes_.weights.capacity() +
          routes_.top1_score.capacity() + plan_.pair_weight.capacity()) *
             sizeof(float) +
         (x_rounded_.capacity() + gathered_rounded_.capacity()) * sizeof(uint16_t) +
         (routes_.experts.capacity() + plan_.pair_expert.capacity() + plan_.pair_slot.capacity() +
          plan_.slot_pairs.capacity()) *
             sizeof(int32_t) +
         plan_.pair_status.capacity();
}

void MoELayer::forward(const float* x, int num_tokens, std::span<const TokenMeta> meta, float* y,
                       RoutingState* state, MoEStats* stats) {
  check_forward_args(x, num_tokens, meta, y, hidden_);
  ensure_workspace(num_tokens);

  // Gate, route, plan. Everything that can reject the batch runs before y or the causal state is touched.
  kernels::linear(config_.gate_kernel, x, num_tokens, hidden_, weights_->router_gate(), logits_.data(),
                  num_experts(), pool_);
  add_router_bias(logits_.data(), num_tokens, num_experts(), weights_->router_bias());
  last_tokens_ = 0;
  router_.route(logits_.data(), num_tokens, routes_);
  planner_.plan(routes_, meta, state, plan_);
  last_tokens_ = num_tokens;

  // Gather the rows of every kept pair, in slot order (bf16 compute: rounded once per token, then gathered;
  // with the weight on the input, each pair's row is scaled by its weight and then rounded).
  const int64_t num_slots = plan_.expert_offsets[num_experts()];
  if (ffns_->takes_rounded() && (has_shared_ || !config_.weight_on_input)) {
    // x rounded once per token: the shared expert's input, and the routed experts' unless the weight is on
    // the input.
    kernels::round_rows_to_bf16(x, num_tokens, hidden_, hidden_, aligned64(x_rounded_), pool_);
  }
  if (config_.weight_on_input) {
    gather_scaled(x, num_slots);
  } else if (ffns_->takes_rounded()) {
    const int64_t row = ffns_->rounded_row_elems();
    uint16_t* xr = aligned64(x_rounded_);
    uint16_t* gathered = aligned64(gathered_rounded_);
    pool_.parallel_for(num_slots, [&](int64_t slot, int) {
      const int64_t token = plan_.slot_pairs[slot] / top_k();
      std::memcpy(gathered + slot * row, xr + token * row, static_cast<size_t>(row) * sizeof(uint16_t));
    });
  } else {
    pool_.parallel_for(num_slots, [&](int64_t slot, int) {
      const int64_t token = plan_.slot_pairs[slot] / top_k();
      std::memcpy(gathered_.data() + slot * hidden_, x + token * hidden_, hidden_ * sizeof(float));
    });
  }

  run_experts();
  if (has_shared_) run_shared(x, num_tokens);
  combine(num_tokens, y);

  if (stats != nullptr) collect_stats(plan_, stats);
}

void MoELayer::gather_scaled(const float* x, int64_t num_slots) {
  const int64_t row = ffns_->takes_rounded() ? ffns_->rounded_row_elems() : hidden_;
  uint16_t* gathered_rounded = ffns_->takes_rounded() ? aligned64(gathered_rounded_) : nullptr;
  pool_.parallel_for(num_slots, [&](int64_t slot, int) {
    const int64_t pair = plan_.slot_pairs[slot];
    const float* src = x + (pair / top_k()) * hidden_;
    if (gathered_rounded == nullptr) {
      scale_row(src, plan_.pair_weight[pair], hidden_, gathered_.data() + slot * hidden_);
    } else {
      // The scaled row goes through the start of the slot's output row (written by the experts later).
      float* scaled = expert_out_.data() + slot * hidden_;
      scale_row(src, plan_.pair_weight[pair], hidden_, scaled);
      kernels::round_to_bf16_span(scaled, hidden_, gathered_rounded + slot * row);
      if (row > hidden_) gathered_rounded[slot * row + hidden_] = 0;  // the pad of an odd hidden size
    }
  });
}

void MoELayer::run_experts() {
  active_experts_.clear();
  int64_t max_rows = 0;
  for (int e = 0; e < num_experts(); ++e) {
    if (plan_.expert_load[e] == 0) continue;
    active_experts_.push_back(e);
    max_rows = std::max<int64_t>(max_rows, plan_.expert_load[e]);
  }
  auto run_expert = [&](int e, float* scratch) {
    const int64_t first = plan_.expert_offsets[e];
    float* out = expert_out_.data() + first * hidden_;
    if (ffns_->takes_rounded()) {
      ffns_->run_expert_rounded(e, aligned64(gathered_rounded_) + first * ffns_->rounded_row_elems(),
                                plan_.expert_load[e], out, scratch, pool_);
    } else {
      ffns_->run_expert(e, gathered_.data() + first * hidden_, plan_.expert_load[e], out, scratch, pool_);
    }
  };
  run_experts_scheduled(active_experts_, max_rows, pool_, scratch_.data(), per_thread_scratch_, run_expert);
}

void MoELayer::run_shared(const float* x, int num_tokens) {
  if (ffns_->takes_rounded()) {
    ffns_->run_shared_rounded(aligned64(x_rounded_), num_tokens, shared_out_.data(), scratch_.data(), pool_);
  } else {
    ffns_->run_shared(x, num_tokens, shared_out_.data(), scratch_.data(), pool_);
  }
  if (weights_->shared_gate()) {
    kernels::linear(config_.gate_kernel, x, num_tokens, hidden_, *weights_->shared_gate(),
                    shared_gate_logit_.data(), 1, pool_);
  }
}

void MoELayer::combine(int num_tokens, float* y) {
  const int k = top_k();
  const bool gated = has_shared_ && weights_->shared_gate().has_value();
  pool_.parallel_for(num_tokens, [&](int64_t t, int) {
    const float* rows[MoELayerConfig::kMaxTopK];
    for (int j = 0; j < k; ++j) {
      const int64_t pair = t * k + j;
      rows[j] =
          plan_.pair_status[pair] == PairStatus::kDropped
              ? nullptr
              : expert_out_.data() + (static_cast<int64_t>(plan_.expert_offsets[plan_.pair_expert[pair]]) +
                                      plan_.pair_slot[pair]) *
                                         hidden_;
    }
    combine_row(k, &plan_.pair_status[t * k], config_.weight_on_input ? nullptr : &plan_.pair_weight[t * k],
                rows, has_shared_ ? shared_out_.data() + t * hidden_ : nullptr,
                gated ? shared_gate_scale(shared_gate_logit_[t]) : 1.0f, hidden_, y + t * hidden_);
  });
}

void check_forward_args(const float* x, int num_tokens, std::span<const TokenMeta> meta, const float* y,
                        int64_t hidden) {
  if (num_tokens < 0) fail("num_tokens must be >= 0 (got " + std::to_string(num_tokens) + ")");
  if (num_tokens > 0 && (x == nullptr || y == nullptr)) fail("x and y must not be null");
  if (static_cast<int64_t>(meta.size()) != num_tokens) {
    fail("token metadata has " + std::to_string(meta.size()) + " rows but x has " +
         std::to_string(num_tokens));
  }
  if (num_tokens > 0 && x < y + num_tokens * hidden && y < x + num_tokens * hidden) {
    fail("y must not overlap x");
  }
}

void collect_stats(const DispatchPlan& plan, MoEStats* stats) {
  stats->num_tokens = plan.num_tokens;
  stats->num_kept = plan.num_kept;
  stats->num_rerouted = plan.num_rerouted;
  stats->num_dropped = plan.num_dropped;
  stats->num_tokens_fully_dropped = plan.num_tokens_fully_dropped;
  stats->expert_load.assign(plan.expert_load.begin(), plan.expert_load.end());
}

Fingerprint layer_fingerprint(const MoELayerConfig& config, const io::LayerWeights& weights,
                              std::string device, int num_threads) {
  Fingerprint f;
  f.config_hash = config.config_hash();
  f.weights_hash = weights.content_hash();
  f.version = MOE_VERSION;
  f.build = build_description();
  f.kernel = std::string(kernels::to_string(config.expert_kernel)) +
             (config.compute == kernels::ComputePrecision::kF32 ? "" : " bf16 compute") + " (gate " +
             std::string(kernels::to_string(config.gate_kernel)) + ")";
  f.dispatch = std::string(to_string(config.policy.scope)) + "/" +
               std::string(to_string(config.policy.priority)) + "/" +
               std::string(to_string(config.policy.overflow));
  f.device = std::move(device);
  f.num_threads = num_threads;
  return f;
}

Fingerprint MoELayer::fingerprint() const {
  return layer_fingerprint(config_, *weights_, "cpu", config_.num_threads);
}

}  // namespace moe
