// Element rules of the expert activations that every backend computes, written once (host and device): the
// CPU's scalar path (kernels/cpu/activations.cc, with the project's fp32 exp; its AVX-512 path spells out the
// same operations) and the CUDA kernels (kernels/cuda/expert_ffn.cu, with CUDA's expf) call them.
#pragma once

#include "base/host_device.h"

namespace moe::kernels::rules {

// gpt-oss's clamped SwiGLU of one element (transformers GptOssExperts; `limit` is config.json's
// swiglu_limit, `alpha` 1.702):
//   g = min(gate, limit)             (clamped above only)
//   u = clamp(up, -limit, limit)
//   out = (u + 1) * (g / (1 + exp(-(alpha * g))))      = (u + 1) * g * sigmoid(alpha * g)
// A NaN in gate or up gives NaN (the comparisons below keep a NaN operand, as torch.clamp does).
template <class Exp>
MOE_HD inline float clamped_swiglu(float gate, float up, float alpha, float limit, Exp exp_fn) {
  const float g = gate > limit ? limit : gate;
  float u = up < -limit ? -limit : up;
  u = u > limit ? limit : u;
  const float glu = g / (1.0f + exp_fn(-(alpha * g)));
  return (u + 1.0f) * glu;
}

}  // namespace moe::kernels::rules
