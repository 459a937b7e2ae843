// Fitting the score model (sim/score_model.h) to recorded router logits: `moe-sim fit`.
#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "router/token_meta.h"
#include "sim/npy.h"
#include "sim/score_model.h"

namespace moe::sim {

// The moment estimates of one recording. Routing under softmax scoring ignores a row's common offset, so
// every row is centred first (y[t][e] = x[t][e] - mean_e x[t][e]); the model's logits are
// pop[e] + sigma_b * z_r[e] + sigma_w * n_t[e] with z, n independent standard normals (ScoreModel with
// noise_std s = sqrt(sigma_b^2 + sigma_w^2) and topic_rho = sigma_b / s, in logit units), whose centred
// per-expert variances are sigma^2 (1 - 1/E); the estimates undo that factor. With m_r the mean centred row
// of request r (n_r rows) and R requests:
//   pop[e]      = mean over requests of m_r[e]
//   sigma_w^2   = sum (y - m_r)^2 / ((sum_r (n_r - 1)) * (E - 1))                      (within requests)
//   sigma_b^2   = sum_r,e (m_r[e] - pop[e])^2 / ((R - 1) * (E - 1)) - sigma_w^2 * mean_r (1 / n_r)
//                 (between requests, less what the within-request noise adds to a mean; 0 when negative)
// The moment model normalised to noise_std 1 is popularity pop / s, topic_rho sigma_b / s, temperature 1 / s.
//
// Routing calibration (FitMethod::kRouting, the default): real router logits are not isotropic (per-expert
// variances and correlations differ), so the moment popularity does not give the recorded choice shares.
// The popularity (in units of s) and topic_rho are then chosen so that the model, on a virtual workload of
// the recorded request lengths (cycled to at least 2^17 tokens, drawn with ScoreModel under kFitSeed),
// matches two routing statistics of the recording under top-k choice (the k largest logits, lower index first
// on a tie):
//   share[e]    the fraction of the T * k choices that went to expert e (what batch-scope capacity sees)
//   dispersion  mean over requests r and experts e of (c[r][e] / (n_r k) - share[e])^2, c[r][e] the choices
//               of request r for e (what per-request, sequence-scope capacity sees)
// by bisection on topic_rho (dispersion rises with it), each step solving the shares by the fixed point
// pop[e] += ln(share_rec[e] / share_model[e]) (the shares floored at 1 / (2 T k)). temperature stays 1 / s.
enum class FitMethod { kMoments, kRouting };
inline constexpr uint64_t kFitSeed = 0x464954ull;  // "FIT": the virtual workload's draws
inline constexpr double kMaxFitRho = 0.99;         // the largest topic_rho the calibration tries

struct ScoreModelFit {
  int64_t tokens = 0;
  int num_experts = 0;
  int64_t requests = 0;
  int64_t min_request_tokens = 0, max_request_tokens = 0;
  std::vector<double> popularity;  // pop[e], logit units, mean 0 over experts
  double sigma_b = 0, sigma_w = 0;
  bool topic_clamped = false;  // the between-request estimate was negative (no topic): rho set to 0
  double noise_std = 0;        // s, logit units
  double topic_rho = 0;        // sigma_b / s
  FitMethod method = FitMethod::kRouting;
  int top_k = 0;
  // kRouting: the recording's statistics and the calibrated model's on the virtual workload.
  std::vector<double> recorded_share, model_share;
  double recorded_dispersion = 0, model_dispersion = 0;
  int64_t virtual_tokens = 0;
  bool rho_clamped = false;  // the dispersion was out of the model's reach at rho 0 or rho kMaxFitRho
  // skew explicit (kMoments: pop / s; kRouting: the calibrated popularity), topic_rho, noise_std 1,
  // temperature 1 / s.
  ScoreModelConfig config;
};

// Estimates the model from logits [T, E] and each row's request (meta[t], T rows). Throws DataError naming
// the problem: meta rows != T, a logit that is not finite (row and column), E < 2, fewer than 2 requests
// ("too few requests to estimate a topic"), no request with 2 or more rows (no within-request noise), or
// logits whose centred rows are all equal (nothing varies); UsageError for top_k outside [1, E].
ScoreModelFit fit_score_model(const LogitsMatrix& logits, std::span<const TokenMeta> meta,
                              FitMethod method = FitMethod::kRouting, int top_k = 2);

struct FitOptions {
  std::string logits_path;
  std::string meta_path;           // empty: one request (an error: no topic can be estimated)
  std::string out_path;            // empty: the scenario goes to stdout
  std::string trace_out_path;      // non-empty: also write the recorded requests as a trace (see below)
  std::string method = "routing";  // "routing" or "moments"
  int top_k = 2;                   // the choices per token the routing calibration matches
};

// The scenario file of a fit: `experts = E`, [scores] with popularity, topic-rho, noise-std and temperature
// (values that read back as the same doubles), and comments giving the sources and the estimates. With
// trace_path non-empty, [workload] adds `trace = "<trace_path>"` and `token-budget = 0` (one static batch
// of the recorded requests, as replay plans them).
std::string fit_scenario_text(const ScoreModelFit& fit, const FitOptions& options);

// The recorded requests as a CSV trace `request_id,arrival_step,prompt_len,decode_len`: one line per request
// in order of first appearance, prompt_len its row count, arrival 0, decode 0.
std::string fit_trace_text(std::span<const TokenMeta> meta);

// `moe-sim fit`: reads the files (the formats replay reads), fits, writes the scenario to options.out_path
// or `out`, and the trace when asked. Returns 0; throws UsageError / DataError.
int run_fit(const FitOptions& options, std::ostream& out);

}  // namespace moe::sim
