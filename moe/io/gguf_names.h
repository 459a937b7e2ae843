// llama.cpp's tensor names of one MoE layer in a GGUF file (src/llama-arch.cpp's LLM_TENSOR_NAMES, with the
// ".weight" / ".bias" suffixes llama-model.cpp loads them with), and their shapes in ne order (ne[0] first).
#pragma once

#include <string>

namespace moe::io {

struct GgufLayerNames {
  explicit GgufLayerNames(int layer) : prefix("blk." + std::to_string(layer) + ".") {}

  std::string prefix;  // "blk.3."

  // The router: [hidden, E]; gpt-oss's bias [E]; DeepSeek-V3 / GLM-4.5's selection bias [E].
  std::string router() const { return prefix + "ffn_gate_inp.weight"; }
  std::string router_bias() const { return prefix + "ffn_gate_inp.bias"; }
  std::string score_bias() const { return prefix + "exp_probs_b.bias"; }
  // The routed experts stacked: gate and up [hidden, ff, E], down [ff, hidden, E]; or gate and up fused,
  // [hidden, 2 ff, E] with the gate's rows first (convert_hf_to_gguf.py --fuse-gate-up-exps).
  std::string gate_exps() const { return prefix + "ffn_gate_exps.weight"; }
  std::string up_exps() const { return prefix + "ffn_up_exps.weight"; }
  std::string down_exps() const { return prefix + "ffn_down_exps.weight"; }
  std::string gate_up_exps() const { return prefix + "ffn_gate_up_exps.weight"; }
  // gpt-oss's expert biases: gate and up [ff, E], down [hidden, E].
  std::string gate_exps_bias() const { return prefix + "ffn_gate_exps.bias"; }
  std::string up_exps_bias() const { return prefix + "ffn_up_exps.bias"; }
  std::string down_exps_bias() const { return prefix + "ffn_down_exps.bias"; }
  // Mixtral's GGUF files from before the stacked tensors: one matrix per expert, gate and up [hidden, ff],
  // down [ff, hidden].
  std::string gate_expert(int e) const { return prefix + "ffn_gate." + std::to_string(e) + ".weight"; }
  std::string up_expert(int e) const { return prefix + "ffn_up." + std::to_string(e) + ".weight"; }
  std::string down_expert(int e) const { return prefix + "ffn_down." + std::to_string(e) + ".weight"; }
  // The (fused) shared expert: gate and up [hidden, shared_ff], down [shared_ff, hidden]; Qwen2-MoE's
  // shared-expert gate [hidden].
  std::string gate_shexp() const { return prefix + "ffn_gate_shexp.weight"; }
  std::string up_shexp() const { return prefix + "ffn_up_shexp.weight"; }
  std::string down_shexp() const { return prefix + "ffn_down_shexp.weight"; }
  std::string shexp_gate() const { return prefix + "ffn_gate_inp_shexp.weight"; }
  // A dense layer's MLP (the leading dense blocks of DeepSeek and GLM, Llama 4's interleaved ones).
  std::string dense_gate() const { return prefix + "ffn_gate.weight"; }
};

}  // namespace moe::io
