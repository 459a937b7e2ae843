// The float64 reference of an MoE layer's output, computed from a plan (the oracle of the accuracy tests of
// every backend), and the per-row relative error against it.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/expert_ffn_bf16.h"
#include "kernels/cpu/linear.h"
#include "moe/io/layer_weights.h"
#include "moe/layer/moe_layer_config.h"
#include "router/dispatch_plan.h"

namespace moe::testing {

// y_ref[t] = sum_j w * FFN_e(x[t]) + g(t) * Shared(x[t]) in double, with routing taken from the layer's plan
// and the FFNs as `config` defines them (activation and its constants, the experts' biases); with
// config.weight_on_input (Llama 4) sum_j FFN_e(w * x[t]), the scaled row formed in fp32 as the layer does.
// compute kBF16: the FFNs' GEMM operands are the bf16 ones the layer uses - x and the weights rounded to
// bf16, and the hidden activation h (computed in double) rounded to bf16 - with every product and sum in
// double (kernels::ffn_bf16_reference_f64 with round_hidden); the gates are fp32 as in the layer.
inline std::vector<double> Reference(const io::LayerWeights& w, const MoELayerConfig& config,
                                     const DispatchPlan& plan, const std::vector<float>& x, int T) {
  const int64_t d = w.shape().hidden;
  const kernels::Activation act = config.activation;
  std::vector<double> y(static_cast<size_t>(T) * d, 0.0), row(d);
  std::vector<float> scaled(static_cast<size_t>(d));
  auto ffn = [&](const io::ExpertTensors& e, const float* xt) {
    if (config.compute == kernels::ComputePrecision::kBF16) {
      kernels::ffn_bf16_reference_f64(act, xt, 1, expert_ffn_weights(e, config), row.data(), nullptr,
                                      /*round_hidden=*/true);
    } else {
      kernels::ffn_reference_f64(act, xt, 1, expert_ffn_weights(e, config), row.data());
    }
  };
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < plan.top_k; ++j) {
      const int64_t p = static_cast<int64_t>(t) * plan.top_k + j;
      if (plan.pair_status[p] == PairStatus::kDropped) continue;
      if (config.weight_on_input) {
        for (int64_t i = 0; i < d; ++i) scaled[static_cast<size_t>(i)] = plan.pair_weight[p] * x[t * d + i];
        ffn(w.experts()[plan.pair_expert[p]], scaled.data());
        for (int64_t i = 0; i < d; ++i) y[t * d + i] += row[i];
        continue;
      }
      ffn(w.experts()[plan.pair_expert[p]], &x[t * d]);
      for (int64_t i = 0; i < d; ++i) y[t * d + i] += plan.pair_weight[p] * row[i];
    }
    if (w.shared()) {
      ffn(*w.shared(), &x[t * d]);
      double g = 1.0;
      if (w.shared_gate()) {
        double logit;
        kernels::linear_reference_f64(&x[t * d], 1, *w.shared_gate(), &logit);
        g = 1.0 / (1.0 + std::exp(-logit));
      }
      for (int64_t i = 0; i < d; ++i) y[t * d + i] += g * row[i];
    }
  }
  return y;
}

// Max over rows of ||y - ref|| / ||ref||.
inline double MaxRowRelativeError(const std::vector<float>& y, const std::vector<double>& ref, int T,
                                  int64_t d) {
  double worst = 0.0;
  for (int t = 0; t < T; ++t) {
    double err = 0.0, norm = 0.0;
    for (int64_t i = 0; i < d; ++i) {
      const double diff = y[t * d + i] - ref[t * d + i];
      err += diff * diff;
      norm += ref[t * d + i] * ref[t * d + i];
    }
    if (norm > 0) worst = std::max(worst, std::sqrt(err / norm));
  }
  return worst;
}

}  // namespace moe::testing
