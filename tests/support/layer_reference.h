// The float64 reference of an MoE layer's output, computed from a plan (the oracle of the accuracy tests of
// every backend), and the per-row relative error against it.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cpu/expert_ffn.h"
#include "kernels/cpu/expert_ffn_bf16.h"
#include "kernels/cpu/linear.h"
#include "moe/io/layer_weights.h"
#include "moe/layer/moe_layer_config.h"
#include "router/dispatch_plan.h"

namespace moe::testing {

// An element of some FFN's hidden activation in row `row` that bf16 compute may round to any bf16 value in
// [lo, hi] (kernels::UndeterminedHidden), and how it moves the reference's output row: choosing v moves
// y_ref[row] by (v - rounded) * direction (direction = the expert's combine weight times its w2 column).
struct HiddenChoice {
  int row = 0;
  double rounded = 0.0, lo = 0.0, hi = 0.0;
  std::vector<double> direction;
};

// y_ref[t] = sum_j w * FFN_e(x[t]) + g(t) * Shared(x[t]) in double, with routing taken from the layer's plan
// and the FFNs as `config` defines them (activation and its constants, the experts' biases); with
// config.weight_on_input (Llama 4) sum_j FFN_e(w * x[t]), the scaled row formed in fp32 as the layer does.
// compute kBF16: the FFNs' GEMM operands are the bf16 ones the layer uses - x and the weights rounded to
// bf16, and the hidden activation h (computed in double) rounded to bf16 - with every product and sum in
// double (kernels::ffn_bf16_reference_f64 with round_hidden); the gates are fp32 as in the layer.
//
// bf16 compute's contract, and why the reference alone cannot fix every rounding of h: the layer rounds its
// fp32 h, the reference the exact h. They agree except where the exact h lies within the kernel's fp32
// error of h (its bound is stated in kernels/cpu/expert_ffn_bf16.h) of a bf16 rounding boundary; there the
// layer may take the other neighbour, one bf16 ulp away, which moves that term of the down projection by
// 2^-8 - 2^-7 of itself. On a small expert one such element moves its row by ~1e-3 (measured on OLMoE's
// fixture, ff 32: a row off by 2.1e-3, and by 7e-8 once the reference takes the kernel's own bf16(h)),
// far above the fp32 accumulation errors that the bf16 tolerance is for. So in bf16 compute `choices`
// (if not null) receives those elements; BestAdmissibleReference below picks their values.
inline std::vector<double> Reference(const io::LayerWeights& w, const MoELayerConfig& config,
                                     const DispatchPlan& plan, const std::vector<float>& x, int T,
                                     std::vector<HiddenChoice>* choices = nullptr) {
  const int64_t d = w.shape().hidden;
  const kernels::Activation act = config.activation;
  std::vector<double> y(static_cast<size_t>(T) * d, 0.0), row(d);
  std::vector<float> scaled(static_cast<size_t>(d));
  std::vector<kernels::UndeterminedHidden> undetermined;
  if (choices != nullptr) choices->clear();
  auto ffn = [&](const io::ExpertTensors& e, const float* xt) {
    undetermined.clear();
    if (config.compute == kernels::ComputePrecision::kBF16) {
      kernels::ffn_bf16_reference_f64(act, xt, 1, expert_ffn_weights(e, config), row.data(), nullptr,
                                      /*round_hidden=*/true, &undetermined);
    } else {
      kernels::ffn_reference_f64(act, xt, 1, expert_ffn_weights(e, config), row.data());
    }
  };
  // y[t] += weight * row; the row's undetermined elements become choices of y[t].
  auto add = [&](int t, double weight) {
    for (int64_t i = 0; i < d; ++i) y[t * d + i] += weight * row[i];
    if (choices == nullptr) return;
    for (kernels::UndeterminedHidden& u : undetermined) {
      for (double& v : u.down) v *= weight;
      choices->push_back({t, u.rounded, u.lo, u.hi, std::move(u.down)});
    }
  };
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < plan.top_k; ++j) {
      const int64_t p = static_cast<int64_t>(t) * plan.top_k + j;
      if (plan.pair_status[p] == PairStatus::kDropped) continue;
      if (config.weight_on_input) {
        for (int64_t i = 0; i < d; ++i) scaled[static_cast<size_t>(i)] = plan.pair_weight[p] * x[t * d + i];
        ffn(w.experts()[plan.pair_expert[p]], scaled.data());
        add(t, 1.0);
        continue;
      }
      ffn(w.experts()[plan.pair_expert[p]], &x[t * d]);
      add(t, plan.pair_weight[p]);
    }
    if (w.shared()) {
      ffn(*w.shared(), &x[t * d]);
      double g = 1.0;
      if (w.shared_gate()) {
        double logit;
        kernels::linear_reference_f64(&x[t * d], 1, *w.shared_gate(), &logit);
        g = 1.0 / (1.0 + std::exp(-logit));
      }
      add(t, g);
    }
  }
  return y;
}

// The reference for the choice of the undetermined elements of h (Reference's `choices`) that brings each
// row nearest to the layer's y: coordinate descent over the choices of a row, each set to the admissible bf16
// value (in [lo, hi]) nearest to its least-squares optimum given the others, sweeps until none moves
// (each move lowers ||y - ref||, so it ends). Whatever choice it ends on, the result is the float64 output of
// an admissible rounding of h: its error against y bounds the distance from y to the nearest one from
// above, so a missed optimum can only make an accuracy test stricter. (It finds the optimum in practice:
// each choice moves its row by ~1e-3 along a column of w2, the fp32 noise is ~1e-7.)
inline std::vector<double> BestAdmissibleReference(const std::vector<float>& y, std::vector<double> ref,
                                                   const std::vector<HiddenChoice>& choices, int64_t d) {
  std::vector<double> value(choices.size());
  for (size_t c = 0; c < choices.size(); ++c) value[c] = choices[c].rounded;
  for (int sweep = 0; sweep < 100; ++sweep) {
    bool moved = false;
    for (size_t c = 0; c < choices.size(); ++c) {
      const HiddenChoice& h = choices[c];
      const double* dir = h.direction.data();
      double* r = &ref[static_cast<size_t>(h.row) * d];
      const float* yr = &y[static_cast<size_t>(h.row) * d];
      double dot = 0.0, norm = 0.0;
      for (int64_t i = 0; i < d; ++i) {
        dot += (yr[i] - r[i]) * dir[i];
        norm += dir[i] * dir[i];
      }
      if (norm == 0.0) continue;
      const double want = value[c] + dot / norm;
      const double v =
          std::clamp(static_cast<double>(kernels::round_to_bf16(static_cast<float>(want))), h.lo, h.hi);
      const double step = v - value[c];
      // ||y - r - step dir||^2 - ||y - r||^2 = step (step norm - 2 dot): take only strict improvements.
      if (step == 0.0 || step * (step * norm - 2.0 * dot) >= 0.0) continue;
      for (int64_t i = 0; i < d; ++i) r[i] += step * dir[i];
      value[c] = v;
      moved = true;
    }
    if (!moved) break;
  }
  return ref;
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
