// The float64 reference of each family's MoE block, written from the families' published modeling code
// (transformers' MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock, Qwen3MoeSparseMoeBlock, OlmoeSparseMoeBlock,
// DeepseekV2Moe, DeepseekV3MoE, Glm4MoeMoE, GptOssMLP, Llama4TextMoe) and the config.json keys they read -
// independently of the project's router and layer (router/, moe/layer): routing, weights, experts and the
// shared expert all in double, on the float64 weights of a written checkpoint (family_checkpoints.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "tests/support/family_checkpoints.h"

namespace moe::testing {

namespace family_ref_detail {

inline double silu(double x) {
  return x / (1.0 + std::exp(-x));
}

// One expert's FFN on row x (double): act(W1 x + b1, W3 x + b3) through W2 (+ b2).
inline std::vector<double> ffn(const RefFfn& f, const std::vector<double>& x, bool gpt_oss, double alpha,
                               double limit) {
  const int64_t d = static_cast<int64_t>(x.size()), ff = f.ff;
  std::vector<double> h(static_cast<size_t>(ff)), y(static_cast<size_t>(d), 0.0);
  for (int64_t j = 0; j < ff; ++j) {
    double g = f.gate_bias.empty() ? 0.0 : f.gate_bias[static_cast<size_t>(j)];
    double u = f.up_bias.empty() ? 0.0 : f.up_bias[static_cast<size_t>(j)];
    for (int64_t i = 0; i < d; ++i) {
      g += f.gate[static_cast<size_t>(j * d + i)] * x[static_cast<size_t>(i)];
      u += f.up[static_cast<size_t>(j * d + i)] * x[static_cast<size_t>(i)];
    }
    if (gpt_oss) {  // gate clamped above, up on both sides, (up + 1) * gate * sigmoid(alpha * gate)
      g = std::min(g, limit);
      u = std::clamp(u, -limit, limit);
      h[static_cast<size_t>(j)] = (u + 1.0) * g / (1.0 + std::exp(-alpha * g));
    } else {
      h[static_cast<size_t>(j)] = silu(g) * u;
    }
  }
  for (int64_t o = 0; o < d; ++o) {
    double acc = f.down_bias.empty() ? 0.0 : f.down_bias[static_cast<size_t>(o)];
    for (int64_t j = 0; j < ff; ++j)
      acc += f.down[static_cast<size_t>(o * ff + j)] * h[static_cast<size_t>(j)];
    y[static_cast<size_t>(o)] = acc;
  }
  return y;
}

// The indices of the k largest values (ties to the lower index) and whether the k-th and the (k+1)-th are
// closer than `eps` (a near-tie that fp32 rounding could resolve the other way).
inline std::vector<int> top_k(const std::vector<double>& v, int k, const std::vector<bool>& allowed,
                              double eps, bool* near_tie) {
  std::vector<int> idx;
  for (int e = 0; e < static_cast<int>(v.size()); ++e) {
    if (allowed[static_cast<size_t>(e)]) idx.push_back(e);
  }
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int a, int b) { return v[static_cast<size_t>(a)] > v[static_cast<size_t>(b)]; });
  if (static_cast<int>(idx.size()) > k && v[static_cast<size_t>(idx[static_cast<size_t>(k - 1)])] -
                                                  v[static_cast<size_t>(idx[static_cast<size_t>(k)])] <
                                              eps) {
    *near_tie = true;
  }
  idx.resize(static_cast<size_t>(std::min<int>(k, static_cast<int>(idx.size()))));
  return idx;
}

}  // namespace family_ref_detail

// The family's MoE block output y [T][d] (double) for rows x [T][d]; near_tie[t] (if given) marks tokens
// whose top-k (or group) choice is within 1e-6 of a tie, which fp32 routing may legitimately resolve
// differently.
inline std::vector<double> family_reference(const WrittenCheckpoint& w, const std::vector<float>& x, int T,
                                            std::vector<bool>* near_tie = nullptr) {
  using namespace family_ref_detail;
  const nlohmann::json& top = w.config;
  const nlohmann::json& c = top.contains("text_config") ? top["text_config"] : top;
  const std::string mt = c.value("model_type", "");
  const RefLayer& r = w.ref;
  const int64_t d = r.d;
  const int E = r.num_experts;
  const int k = c["num_experts_per_tok"].get<int>();
  const bool gpt_oss = mt == "gpt_oss", llama4 = mt.rfind("llama4", 0) == 0;
  const bool sigmoid_family = mt == "deepseek_v3" || mt == "glm4_moe";
  const double alpha = 1.702, limit = c.value("swiglu_limit", 7.0);
  std::vector<double> y(static_cast<size_t>(T * d), 0.0);
  if (near_tie) near_tie->assign(static_cast<size_t>(T), false);
  for (int t = 0; t < T; ++t) {
    std::vector<double> xt(static_cast<size_t>(d));
    for (int64_t i = 0; i < d; ++i) xt[static_cast<size_t>(i)] = x[static_cast<size_t>(t * d + i)];
    std::vector<double> logits(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) {
      double acc = r.router_bias.empty() ? 0.0 : r.router_bias[static_cast<size_t>(e)];
      for (int64_t i = 0; i < d; ++i)
        acc += r.router[static_cast<size_t>(e * d + i)] * xt[static_cast<size_t>(i)];
      logits[static_cast<size_t>(e)] = acc;
    }
    // Scores, and the values the top-k is taken over.
    std::vector<double> score(static_cast<size_t>(E)), choice(static_cast<size_t>(E));
    if (sigmoid_family || llama4) {
      for (int e = 0; e < E; ++e)
        score[static_cast<size_t>(e)] = 1.0 / (1.0 + std::exp(-logits[static_cast<size_t>(e)]));
    } else {
      const double m = *std::max_element(logits.begin(), logits.end());
      double z = 0.0;
      for (int e = 0; e < E; ++e) z += std::exp(logits[static_cast<size_t>(e)] - m);
      for (int e = 0; e < E; ++e)
        score[static_cast<size_t>(e)] = std::exp(logits[static_cast<size_t>(e)] - m) / z;
    }
    for (int e = 0; e < E; ++e) {
      choice[static_cast<size_t>(e)] =
          gpt_oss || llama4 ? logits[static_cast<size_t>(e)]
                            : score[static_cast<size_t>(e)] +
                                  (r.score_bias.empty() ? 0.0 : r.score_bias[static_cast<size_t>(e)]);
    }
    // The group limit: DeepSeek-V2 group_limited_greedy (a group's best score), DeepSeek-V3 / GLM-4.5 (the
    // sum of its two best biased scores); the other experts are not chosen.
    std::vector<bool> allowed(static_cast<size_t>(E), true);
    bool tie = false;
    const int groups = c.value("n_group", 1);
    const bool limited =
        (mt == "deepseek_v2" && c.value("topk_method", "greedy") == "group_limited_greedy") ||
        (sigmoid_family && groups > 1);
    if (limited) {
      const int span = E / groups;
      std::vector<double> value(static_cast<size_t>(groups));
      for (int g = 0; g < groups; ++g) {
        std::vector<double> members(choice.begin() + g * span, choice.begin() + (g + 1) * span);
        std::sort(members.rbegin(), members.rend());
        value[static_cast<size_t>(g)] = mt == "deepseek_v2" ? members[0] : members[0] + members[1];
      }
      const std::vector<int> kept = top_k(value, c["topk_group"].get<int>(),
                                          std::vector<bool>(static_cast<size_t>(groups), true), 1e-6, &tie);
      std::fill(allowed.begin(), allowed.end(), false);
      for (int g : kept) {
        for (int e = g * span; e < (g + 1) * span; ++e) allowed[static_cast<size_t>(e)] = true;
      }
    }
    const std::vector<int> chosen = top_k(choice, k, allowed, 1e-6, &tie);
    if (near_tie) (*near_tie)[static_cast<size_t>(t)] = tie;
    // The weights of the chosen experts.
    std::vector<double> weight(chosen.size());
    if (gpt_oss) {  // a softmax over the chosen logits
      double m = -INFINITY, z = 0.0;
      for (int e : chosen) m = std::max(m, logits[static_cast<size_t>(e)]);
      for (int e : chosen) z += std::exp(logits[static_cast<size_t>(e)] - m);
      for (size_t j = 0; j < chosen.size(); ++j)
        weight[j] = std::exp(logits[static_cast<size_t>(chosen[j])] - m) / z;
    } else {
      for (size_t j = 0; j < chosen.size(); ++j) weight[j] = score[static_cast<size_t>(chosen[j])];
      bool normalize = false;
      if (mt == "mixtral") normalize = true;
      if (mt == "qwen2_moe" || mt == "qwen3_moe" || mt == "olmoe")
        normalize = c.value("norm_topk_prob", false);
      if (mt == "deepseek_v3") normalize = c.value("norm_topk_prob", true) && k > 1;
      if (mt == "glm4_moe") normalize = c.value("norm_topk_prob", true);
      if (normalize) {
        const double sum = std::accumulate(weight.begin(), weight.end(), 0.0);
        for (double& v : weight) v /= sum;
      }
      const double scale = c.value("routed_scaling_factor", 1.0);
      for (double& v : weight) v *= scale;
    }
    double* yt = y.data() + t * d;
    for (size_t j = 0; j < chosen.size(); ++j) {
      const RefFfn& f = r.experts[static_cast<size_t>(chosen[j])];
      if (llama4) {  // the weight scales the expert's input
        std::vector<double> scaled = xt;
        for (double& v : scaled) v *= weight[j];
        const std::vector<double> out = ffn(f, scaled, false, alpha, limit);
        for (int64_t i = 0; i < d; ++i) yt[i] += out[static_cast<size_t>(i)];
      } else {
        const std::vector<double> out = ffn(f, xt, gpt_oss, alpha, limit);
        for (int64_t i = 0; i < d; ++i) yt[i] += weight[j] * out[static_cast<size_t>(i)];
      }
    }
    if (r.shared) {
      double g = 1.0;
      if (!r.shared_gate.empty()) {  // Qwen2-MoE: sigmoid(shared_expert_gate . x)
        double logit = 0.0;
        for (int64_t i = 0; i < d; ++i)
          logit += r.shared_gate[static_cast<size_t>(i)] * xt[static_cast<size_t>(i)];
        g = 1.0 / (1.0 + std::exp(-logit));
      }
      const std::vector<double> out = ffn(*r.shared, xt, false, alpha, limit);
      for (int64_t i = 0; i < d; ++i) yt[i] += g * out[static_cast<size_t>(i)];
    }
  }
  return y;
}

}  // namespace moe::testing
