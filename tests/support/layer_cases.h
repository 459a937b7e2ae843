// The one table of MoE layer cases that every backend runs (tests/layer_cases_test.cc, in the style of ggml's
// test-backend-ops): shapes like Mixtral (E 8, top-2), Qwen2-MoE (a gated shared expert, top-4 without
// renormalisation) and DeepSeek-V3 (sigmoid + selection bias, group-limited choice, a fused shared expert);
// f32 and bf16 storage; every preset and capacity scope; reroute; GELU; causal and sequence state over
// several calls; and every family's checkpoint loaded through from_pretrained (the fam_* cases: Mixtral,
// Qwen2/Qwen3-MoE, OLMoE, DeepSeek-V2/V3, Kimi K2, GLM-4.5, gpt-oss, Llama 4; bf16, f32, FP8, MXFP4; in fp32
// compute, and in bf16 compute for every bf16, FP8 and MXFP4 checkpoint under the deterministic and greedy
// presets). A case says what it computes; whether its outputs must be bitwise invariant follows from its
// config.
#pragma once

#include <string>
#include <vector>

#include "moe/io/layer_weights.h"
#include "moe/io/pretrained.h"
#include "moe/layer/moe_layer_config.h"
#include "tests/support/family_checkpoints.h"
#include "tests/support/layer_fixtures.h"

namespace moe::testing {

struct LayerCase {
  std::string name;  // a gtest-safe name: letters, digits, '_'
  io::LayerShape shape;
  kernels::DType storage = kernels::DType::kF32;
  MoELayerConfig config;
  int calls = 1;            // forward calls over the same requests (their positions continue)
  double tolerance = 1e-5;  // per-row relative error against the float64 reference of the case's own plan
  // A family checkpoint (tests/support/family_checkpoints.h) whose last MoE layer the case loads through
  // io::load_pretrained_layer with `storage`, its config from MoELayerConfig::pretrained; "": random weights.
  std::string family = {};
};

// Whether a config promises bitwise invariance to strangers and row order (docs/determinism.md clauses 1, 4):
// invariant kernels for experts and gate, and a policy whose plan restricted to a request depends only on it.
inline bool promises_invariance(const MoELayerConfig& c) {
  if (c.expert_kernel != kernels::KernelKind::kInvariant ||
      c.gate_kernel != kernels::KernelKind::kInvariant) {
    return false;
  }
  switch (c.policy.scope) {
    case CapacityScope::kCausal:
    case CapacityScope::kSequence:
    case CapacityScope::kPrefix:
    case CapacityScope::kNone:
      return true;
    case CapacityScope::kRequest:
      return c.policy.priority == Priority::kRequest || c.policy.priority == Priority::kRandom;
    case CapacityScope::kBatch:
      return false;
  }
  return false;
}

// Whether a config also promises that a request's outputs do not depend on how its prompt is chunked into
// forward passes (clause 2): an invariant config whose capacity is decided by the request itself (its prefix,
// or its admitted prompt length) whatever the forward passes are.
inline bool promises_chunking_invariance(const MoELayerConfig& c) {
  return promises_invariance(c) && c.policy.scope != CapacityScope::kRequest;
}

// Dispatch with capacity that strangers can take (batch scope) but invariant kernels: every change of a
// probe's bits is capacity competition, which the counter-check must find.
inline bool is_greedy_dispatch_counter_check(const LayerCase& c) {
  return c.config.policy.scope == CapacityScope::kBatch && c.config.policy.priority == Priority::kArrival &&
         c.config.expert_kernel == kernels::KernelKind::kInvariant;
}

namespace layer_cases_detail {

// Router and shape of the three families.
inline MoELayerConfig mixtral(const char* preset) {
  MoELayerConfig c = MoELayerConfig::preset(preset, io::Architecture::kMixtral);
  c.router.num_experts = 8;
  c.router.top_k = 2;
  c.policy.capacity_factor = 1.0;  // capacity binds: drops happen, so invariance means something
  c.max_tokens = 64;               // smaller than some batches: the workspace grows once
  return c;
}

inline io::LayerShape qwen2_shape() {
  return Qwen2LikeShape();  // d 96, ff 64, E 8, one gated shared expert of 160
}
inline MoELayerConfig qwen2(const char* preset) {
  MoELayerConfig c = MoELayerConfig::preset(preset, io::Architecture::kQwen2Moe);
  c.router.num_experts = 8;
  c.router.top_k = 4;  // Qwen2-MoE's rule: softmax over all experts, top-k not renormalised
  c.policy.capacity_factor = 1.0;
  c.max_tokens = 64;
  return c;
}

inline io::LayerShape deepseek_shape() {
  io::LayerShape s = SmallShape(64, 48, 16);
  s.num_shared_experts = 1;
  s.shared_ff = 64;
  s.score_bias = true;
  return s;
}
inline MoELayerConfig deepseek(const char* preset) {
  MoELayerConfig c = MoELayerConfig::preset(preset, io::Architecture::kDeepseekV3);
  c.router.num_experts = 16;
  c.router.top_k = 4;
  c.router.num_groups = 4;
  c.router.topk_groups = 2;
  c.policy.capacity_factor = 1.0;
  c.max_tokens = 64;
  return c;
}

inline MoELayerConfig with(MoELayerConfig c, CapacityScope scope, Priority priority,
                           Overflow overflow = Overflow::kDrop, int depth = 1) {
  c.policy.scope = scope;
  c.policy.priority = priority;
  c.policy.overflow = overflow;
  c.policy.reroute_depth = depth;
  return c;
}

inline MoELayerConfig invariant_kernels(MoELayerConfig c) {
  c.expert_kernel = c.gate_kernel = kernels::KernelKind::kInvariant;
  return c;
}

inline MoELayerConfig threads(MoELayerConfig c, int n) {
  c.num_threads = n;
  return c;
}

// Prefix scope with a lookahead short enough that the harness's prompts see their horizons move.
inline MoELayerConfig lookahead(MoELayerConfig c, uint32_t w) {
  c.policy.scope = CapacityScope::kPrefix;
  c.policy.lookahead = w;
  return c;
}

inline MoELayerConfig bf16_compute(MoELayerConfig c) {
  c.compute = kernels::ComputePrecision::kBF16;
  return c;
}

// The accuracy bound of bf16 compute: per-row relative error against Reference(..., kBF16) - float64 of
// the same bf16 GEMM operands, h rounded to bf16 from its exact value - where the elements of h that the
// kernel's contract lets round either way (their exact value within the kernel's fp32 error of a bf16
// rounding boundary, kernels/cpu/expert_ffn_bf16.h) take the admissible bf16 values nearest the layer's
// output (BestAdmissibleReference, tests/support/layer_reference.h). What remains is the fp32
// accumulation: |err| <= 4 sqrt(2P) 2^-24 of sum |xb_i wb_i| per output (kernels/cpu/linear_bf16.h), ~1e-6
// relative per GEMM. Measured on the table's cases: at most 3.2e-7 (against the reference's own rounding
// of every h, up to 2.1e-3: one element of h rounded the other way moves a row of a small expert by that
// much). The bound, 1e-4, is far below what a defect shows against this reference (measured on the family
// fixtures: an fp32-computing layer 5e-3, h truncated instead of rounded 6e-3, y scaled by 1 + 3e-4 3e-4),
// so the cases check that bf16 compute, and nothing else, is what runs.
inline constexpr double kBf16ComputeTolerance = 1e-4;

// The accuracy bound of quantized storage (the quantized kernels, kernels/cpu/linear_quant.h), against the
// float64 reference on the exactly dequantized weights: the activation rule rounds both GEMM inputs of every
// expert - int8 blocks (each element within dx / 2 = 1/254 of its block's largest) or bf16 for FP8 (2^-9 of
// itself). Per rounding the row's relative error is about (block max / rms) / (127 sqrt 12), ~0.5 % for x and
// 1-1.5 % for the heavier-tailed h (tests/kernels_cpu_quant_accuracy_test.cc measures 1.1-1.6e-2 on one FFN);
// the bound allows 2x: 3e-2 (int8), 7.5e-3 (bf16 rule). The kernels' own fp32 error, with the rule's inputs,
// is bounded tightly (gamma(n) of the chain) in that test.
inline double quant_tolerance(kernels::DType storage) {
  return storage == kernels::DType::kFP8 ? 7.5e-3 : 3e-2;
}

// A case that loads a family checkpoint's MoE layer (written once per process): its config.json's router
// and expert semantics under `preset`, capacity factor 1.0 so that capacity binds, then `edit`. Its accuracy
// bound follows the compute precision `edit` leaves: 1e-5 in fp32, kBf16ComputeTolerance in bf16.
template <class Edit>
LayerCase family(const std::string& name, const std::string& family_case, const char* preset,
                 kernels::DType storage, Edit edit, int calls = 1) {
  const WrittenFamily& f = written_family(family_case);
  MoELayerConfig c = MoELayerConfig::pretrained(preset, f.config);
  c.policy.capacity_factor = 1.0;
  c.max_tokens = 64;
  c = edit(c);
  const double tolerance = kernels::is_quantized(storage)                  ? quant_tolerance(storage)
                           : c.compute == kernels::ComputePrecision::kBF16 ? kBf16ComputeTolerance
                                                                           : 1e-5;
  return LayerCase{name, f.config.layer, storage, c, calls, tolerance, family_case};
}

inline MoELayerConfig same(MoELayerConfig c) {
  return c;
}

inline MoELayerConfig bf16c(MoELayerConfig c) {
  return bf16_compute(c);
}

}  // namespace layer_cases_detail

inline std::vector<LayerCase> layer_cases() {
  using namespace layer_cases_detail;
  using kernels::DType;
  const io::LayerShape mix = SmallShape(64, 96, 8);
  const io::LayerShape k_mix = SmallShape(256, 256, 8);  // K-quants: rows of whole 256-element super-blocks
  io::LayerShape k_deepseek = SmallShape(256, 256, 16);
  k_deepseek.num_shared_experts = 1;
  k_deepseek.shared_ff = 256;
  k_deepseek.score_bias = true;
  const io::LayerShape gelu_shape = SmallShape(64, 128, 8);
  MoELayerConfig gelu_det = mixtral("deterministic");
  gelu_det.activation = kernels::Activation::kGELU;
  MoELayerConfig gelu_greedy = mixtral("greedy");
  gelu_greedy.activation = kernels::Activation::kGELU;
  const auto R = CapacityScope::kRequest, C = CapacityScope::kCausal, B = CapacityScope::kBatch,
             N = CapacityScope::kNone, S = CapacityScope::kSequence;
  const auto req = Priority::kRequest, arr = Priority::kArrival, score = Priority::kScore,
             rnd = Priority::kRandom;
  const auto reroute = Overflow::kReroute, drop = Overflow::kDrop;
  return {
      // Mixtral-like: every preset and scope. The deterministic preset is prefix scope (W = 16).
      {"mixtral_f32_deterministic", mix, DType::kF32, mixtral("deterministic")},
      {"mixtral_f32_sequence_3calls", mix, DType::kF32, threads(mixtral("deterministic"), 2), 3},
      {"mixtral_bf16_sequence_reroute", mix, DType::kBF16, with(mixtral("deterministic"), S, req, reroute, 2),
       3},
      {"mixtral_f32_sequence_score_priority", mix, DType::kF32, with(mixtral("deterministic"), S, score), 2},
      {"mixtral_f32_prefix_lookahead2_3calls", mix, DType::kF32, lookahead(mixtral("deterministic"), 2), 3},
      {"mixtral_bf16_prefix_lookahead0_reroute", mix, DType::kBF16,
       lookahead(with(mixtral("deterministic"), S, req, reroute), 0), 2},
      {"mixtral_f32_request", mix, DType::kF32, with(mixtral("deterministic"), R, req)},
      {"mixtral_f32_deterministic_2threads", mix, DType::kF32, threads(mixtral("deterministic"), 2)},
      {"mixtral_f32_greedy", mix, DType::kF32, threads(mixtral("greedy"), 2)},
      {"mixtral_bf16_deterministic", mix, DType::kBF16, threads(mixtral("deterministic"), 2)},
      {"mixtral_bf16_greedy", mix, DType::kBF16, mixtral("greedy")},
      {"mixtral_f32_causal", mix, DType::kF32, threads(with(mixtral("deterministic"), C, req), 2), 3},
      {"mixtral_bf16_causal_reroute", mix, DType::kBF16, with(mixtral("deterministic"), C, req, reroute), 2},
      {"mixtral_f32_dropless", mix, DType::kF32, with(mixtral("deterministic"), N, req)},
      {"mixtral_f32_request_random_priority", mix, DType::kF32, with(mixtral("deterministic"), R, rnd)},
      {"mixtral_f32_greedy_dispatch_invariant_kernels", mix, DType::kF32,
       with(mixtral("deterministic"), B, arr)},
      {"mixtral_f32_batch_score_priority", mix, DType::kF32, with(mixtral("deterministic"), B, score)},
      {"mixtral_f32_gelu_deterministic", gelu_shape, DType::kF32, gelu_det},
      {"mixtral_f32_gelu_greedy", gelu_shape, DType::kF32, gelu_greedy},
      // Qwen2-MoE-like: a shared expert with its sigmoid gate.
      {"qwen2_f32_deterministic", qwen2_shape(), DType::kF32, threads(qwen2("deterministic"), 2)},
      {"qwen2_bf16_deterministic_reroute", qwen2_shape(), DType::kBF16,
       threads(with(qwen2("deterministic"), R, req, reroute), 2)},
      {"qwen2_f32_greedy", qwen2_shape(), DType::kF32, qwen2("greedy")},
      {"qwen2_bf16_greedy_dispatch_reroute", qwen2_shape(), DType::kBF16,
       invariant_kernels(with(qwen2("greedy"), B, arr, reroute))},
      {"qwen2_bf16_causal_reroute", qwen2_shape(), DType::kBF16,
       with(qwen2("deterministic"), C, req, reroute), 2},
      // DeepSeek-V3-like: sigmoid scores with selection bias, group-limited choice, a fused shared expert.
      {"deepseek_bf16_deterministic_reroute2", deepseek_shape(), DType::kBF16,
       with(deepseek("deterministic"), R, req, reroute, 2)},
      {"deepseek_f32_greedy", deepseek_shape(), DType::kF32, threads(deepseek("greedy"), 2)},
      {"deepseek_f32_causal", deepseek_shape(), DType::kF32, with(deepseek("deterministic"), C, req, drop),
       2},
      {"deepseek_f32_prefix_lookahead4_reroute", deepseek_shape(), DType::kF32,
       threads(lookahead(with(deepseek("deterministic"), S, req, reroute, 2), 4), 2), 2},
      {"deepseek_f32_sequence_reroute", deepseek_shape(), DType::kF32,
       threads(with(deepseek("deterministic"), S, req, reroute), 2), 2},
      // bf16 compute (MoELayerConfig::compute): the invariant bf16 kernel under the deterministic preset,
      // oneDNN (or Eigen) under greedy; bf16 and fp32 (rounded at load) weights; shared experts; GELU.
      {"mixtral_bf16c_deterministic", mix, DType::kBF16, bf16_compute(threads(mixtral("deterministic"), 2)),
       1, kBf16ComputeTolerance},
      {"mixtral_bf16c_f32weights_sequence_3calls", mix, DType::kF32, bf16_compute(mixtral("deterministic")),
       3, kBf16ComputeTolerance},
      {"mixtral_bf16c_greedy", mix, DType::kBF16, bf16_compute(threads(mixtral("greedy"), 2)), 1,
       kBf16ComputeTolerance},
      {"mixtral_bf16c_greedy_dispatch_invariant_kernels", mix, DType::kBF16,
       bf16_compute(with(mixtral("deterministic"), B, arr)), 1, kBf16ComputeTolerance},
      {"mixtral_bf16c_gelu_deterministic", gelu_shape, DType::kBF16, bf16_compute(gelu_det), 1,
       kBf16ComputeTolerance},
      {"qwen2_bf16c_deterministic", qwen2_shape(), DType::kBF16,
       bf16_compute(threads(qwen2("deterministic"), 2)), 1, kBf16ComputeTolerance},
      {"qwen2_bf16c_greedy", qwen2_shape(), DType::kBF16, bf16_compute(qwen2("greedy")), 1,
       kBf16ComputeTolerance},
      {"deepseek_bf16c_sequence_reroute", deepseek_shape(), DType::kBF16,
       bf16_compute(threads(with(deepseek("deterministic"), S, req, reroute), 2)), 2, kBf16ComputeTolerance},
      // Quantized storage (kernels/quant_formats.h), run by the quantized kernels: every format, routed and
      // shared experts, both presets, threads, calls.
      {"mixtral_q4_k_deterministic", k_mix, DType::kQ4_K, threads(mixtral("deterministic"), 2), 1,
       quant_tolerance(DType::kQ4_K)},
      {"mixtral_q8_0_greedy", mix, DType::kQ8_0, mixtral("greedy"), 1, quant_tolerance(DType::kQ8_0)},
      {"qwen2_mxfp4_deterministic", qwen2_shape(), DType::kMXFP4, threads(qwen2("deterministic"), 2), 1,
       quant_tolerance(DType::kMXFP4)},
      {"deepseek_q6_k_sequence", k_deepseek, DType::kQ6_K, with(deepseek("deterministic"), S, req), 2,
       quant_tolerance(DType::kQ6_K)},
      {"mixtral_fp8_causal", mix, DType::kFP8, threads(with(mixtral("deterministic"), C, req), 2), 2,
       quant_tolerance(DType::kFP8)},
      // Every family through from_pretrained: the layer of a checkpoint in the family's published layout
      // (bf16, f32, FP8 block-scaled, MXFP4; sharded), with config.json's router and expert semantics.
      family("fam_mixtral_bf16_deterministic", "mixtral_bf16", "deterministic", DType::kBF16, same),
      family("fam_qwen2_moe_f32_greedy", "qwen2_moe_f32", "greedy", DType::kF32, same),
      family(
          "fam_qwen3_moe_bf16_sequence_3calls", "qwen3_moe_bf16", "deterministic", DType::kBF16,
          [](MoELayerConfig c) { return threads(c, 2); }, 3),
      family("fam_qwen3_moe_fp8_dropless", "qwen3_moe_fp8", "deterministic", DType::kF32,
             [](MoELayerConfig c) { return with(c, N, req); }),
      family("fam_olmoe_f32_request_reroute", "olmoe_f32", "deterministic", DType::kF32,
             [](MoELayerConfig c) { return with(c, R, req, reroute); }),
      family("fam_deepseek_v2_bf16_deterministic", "deepseek_v2_bf16", "deterministic", DType::kBF16, same,
             2),
      family(
          "fam_deepseek_v3_fp8_causal", "deepseek_v3_fp8", "deterministic", DType::kBF16,
          [](MoELayerConfig c) { return threads(with(c, C, req), 2); }, 2),
      family("fam_kimi_k2_fp8_greedy", "kimi_k2_fp8", "greedy", DType::kF32, same),
      family("fam_glm4_moe_bf16_greedy_dispatch", "glm4_moe_bf16", "deterministic", DType::kBF16,
             [](MoELayerConfig c) { return with(c, B, arr); }),
      family(
          "fam_gpt_oss_mxfp4_deterministic", "gpt_oss_mxfp4", "deterministic", DType::kBF16,
          [](MoELayerConfig c) { return threads(c, 2); }, 2),
      family("fam_gpt_oss_bf16_greedy", "gpt_oss_bf16", "greedy", DType::kBF16, same),
      family("fam_qwen3_moe_fp8_as_stored", "qwen3_moe_fp8", "deterministic", DType::kFP8, same),
      family(
          "fam_gpt_oss_mxfp4_as_stored", "gpt_oss_mxfp4", "deterministic", DType::kMXFP4,
          [](MoELayerConfig c) { return threads(c, 2); }, 2),
      family("fam_llama4_bf16_deterministic", "llama4_bf16", "deterministic", DType::kBF16, same, 2),
      family("fam_llama4_text_f32_greedy", "llama4_text_f32", "greedy", DType::kF32, same),
      // bf16 compute of every bf16, FP8 and MXFP4 family checkpoint under both presets the family rows use
      // (deterministic: the invariant bf16 kernel; greedy: the fast one); bf16 storage, or fp32 storage
      // rounded to bf16 at load for some FP8 ones.
      family("fam_mixtral_bf16c_deterministic", "mixtral_bf16", "deterministic", DType::kBF16,
             [](MoELayerConfig c) { return bf16_compute(threads(c, 2)); }),
      family("fam_mixtral_bf16c_greedy", "mixtral_bf16", "greedy", DType::kBF16, bf16c),
      family("fam_qwen2_moe_bf16c_deterministic", "qwen2_moe_bf16", "deterministic", DType::kBF16, bf16c, 2),
      family("fam_qwen2_moe_bf16c_greedy", "qwen2_moe_bf16", "greedy", DType::kBF16, bf16c),
      family("fam_qwen3_moe_bf16c_deterministic", "qwen3_moe_bf16", "deterministic", DType::kBF16, bf16c),
      family("fam_qwen3_moe_bf16c_greedy", "qwen3_moe_bf16", "greedy", DType::kBF16, bf16c),
      family("fam_qwen3_moe_fp8_bf16c_dropless", "qwen3_moe_fp8", "deterministic", DType::kF32,
             [](MoELayerConfig c) { return bf16_compute(with(c, N, req)); }),
      family("fam_qwen3_moe_fp8_bf16c_greedy", "qwen3_moe_fp8", "greedy", DType::kBF16, bf16c),
      family("fam_olmoe_bf16c_request_reroute", "olmoe_bf16", "deterministic", DType::kBF16,
             [](MoELayerConfig c) { return bf16_compute(with(c, R, req, reroute)); }),
      family("fam_olmoe_bf16c_greedy", "olmoe_bf16", "greedy", DType::kBF16, bf16c),
      family("fam_deepseek_v2_bf16c_deterministic", "deepseek_v2_bf16", "deterministic", DType::kBF16, bf16c,
             2),
      family("fam_deepseek_v2_bf16c_greedy", "deepseek_v2_bf16", "greedy", DType::kBF16, bf16c),
      family("fam_deepseek_v3_bf16c_deterministic", "deepseek_v3_bf16", "deterministic", DType::kBF16, bf16c,
             1),
      family("fam_deepseek_v3_bf16c_greedy", "deepseek_v3_bf16", "greedy", DType::kBF16, bf16c),
      family(
          "fam_deepseek_v3_fp8_bf16c_causal", "deepseek_v3_fp8", "deterministic", DType::kBF16,
          [](MoELayerConfig c) { return bf16_compute(threads(with(c, C, req), 2)); }, 2),
      family("fam_deepseek_v3_fp8_bf16c_greedy", "deepseek_v3_fp8", "greedy", DType::kBF16, bf16c, 1),
      family("fam_kimi_k2_fp8_bf16c_deterministic", "kimi_k2_fp8", "deterministic", DType::kBF16, bf16c),
      family("fam_kimi_k2_fp8_bf16c_greedy", "kimi_k2_fp8", "greedy", DType::kF32, bf16c),
      family("fam_glm4_moe_bf16c_deterministic", "glm4_moe_bf16", "deterministic", DType::kBF16, bf16c),
      family("fam_glm4_moe_bf16c_greedy", "glm4_moe_bf16", "greedy", DType::kBF16, bf16c),
      family("fam_glm4_moe_fp8_bf16c_deterministic", "glm4_moe_fp8", "deterministic", DType::kF32, bf16c),
      family("fam_glm4_moe_fp8_bf16c_greedy", "glm4_moe_fp8", "greedy", DType::kBF16, bf16c),
      family("fam_gpt_oss_bf16c_deterministic", "gpt_oss_bf16", "deterministic", DType::kBF16, bf16c),
      family("fam_gpt_oss_bf16c_greedy", "gpt_oss_bf16", "greedy", DType::kBF16, bf16c),
      family("fam_gpt_oss_mxfp4_bf16c", "gpt_oss_mxfp4", "deterministic", DType::kBF16,
             [](MoELayerConfig c) { return bf16_compute(threads(c, 2)); }),
      family("fam_gpt_oss_mxfp4_bf16c_greedy", "gpt_oss_mxfp4", "greedy", DType::kBF16, bf16c),
      family("fam_llama4_bf16c_sequence", "llama4_bf16", "deterministic", DType::kBF16, bf16c, 2),
      family("fam_llama4_bf16c_greedy", "llama4_bf16", "greedy", DType::kBF16, bf16c),
  };
}

}  // namespace moe::testing
