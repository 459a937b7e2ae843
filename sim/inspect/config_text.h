// One-line descriptions of a checkpoint's router and experts (io::PretrainedConfig), shared by the reports of
// `moe-sim inspect` on a Hugging Face directory and on a GGUF file.
#pragma once

#include <string>

#include "moe/io/pretrained.h"

namespace moe::sim {

// "softmax over all 8 experts; top-2 by score; renormalised", with the bias, group and scaling rules.
std::string scoring_text(const io::PretrainedConfig& c);
// "SwiGLU down(silu(gate x) * up x)" or gpt-oss's clamped SwiGLU with its constants.
std::string expert_text(const io::PretrainedConfig& c);
// "hidden 64, 8 routed experts of 48 (intermediate_size), top-2, shared expert of ..." (the MoE layer line).
std::string layer_text(const io::PretrainedConfig& c);
// "4; MoE 1, 3 (2), dense MLP 2" (the layers line).
std::string layers_text(const io::PretrainedConfig& c);

}  // namespace moe::sim
