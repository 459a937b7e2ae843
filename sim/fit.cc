#include "sim/fit.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>
#include <unordered_map>

#include "sim/errors.h"
#include "sim/meta_csv.h"
#include "sim/text.h"

namespace moe::sim {
namespace {

std::string list_text(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + format_double(v[i]);
  return out + "]";
}

// A TOML basic string holding `s` (quotes and backslashes escaped).
std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Routing statistics of logits [rows, E] under top-k choice: per-expert shares of the choices and the
// dispersion of the per-request shares around them (ScoreModelFit's definitions).
struct RoutingMoments {
  std::vector<double> share;
  double dispersion = 0;
};

RoutingMoments routing_moments(const float* logits, int64_t rows, int E, int k,
                               const std::vector<size_t>& request_of, size_t num_requests) {
  std::vector<int64_t> per_request(num_requests * E, 0), per_request_rows(num_requests, 0), total(E, 0);
  std::vector<int> order(E);
  for (int64_t t = 0; t < rows; ++t) {
    const float* x = logits + t * E;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [x](int a, int b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
    const size_t r = request_of[t];
    ++per_request_rows[r];
    for (int j = 0; j < k; ++j) {
      ++per_request[r * E + order[j]];
      ++total[order[j]];
    }
  }
  RoutingMoments m;
  m.share.resize(E);
  for (int e = 0; e < E; ++e) m.share[e] = static_cast<double>(total[e]) / (static_cast<double>(rows) * k);
  double sum = 0;
  size_t counted = 0;
  for (size_t r = 0; r < num_requests; ++r) {
    if (per_request_rows[r] == 0) continue;
    ++counted;
    const double n = static_cast<double>(per_request_rows[r]) * k;
    for (int e = 0; e < E; ++e) {
      const double d = per_request[r * E + e] / n - m.share[e];
      sum += d * d;
    }
  }
  m.dispersion = sum / (static_cast<double>(counted) * E);
  return m;
}

// The virtual workload of the routing calibration: the recorded request lengths, cycled.
struct VirtualWorkload {
  std::vector<TokenMeta> rows;
  std::vector<size_t> request_of;
  size_t requests = 0;
};

VirtualWorkload virtual_workload(const std::vector<int64_t>& lengths, int64_t min_tokens) {
  VirtualWorkload w;
  for (size_t i = 0; static_cast<int64_t>(w.rows.size()) < min_tokens || i < lengths.size(); ++i) {
    const int64_t n = lengths[i % lengths.size()];
    for (int64_t p = 0; p < n; ++p) {
      w.rows.push_back(TokenMeta{static_cast<uint64_t>(i), static_cast<uint32_t>(p)});
      w.request_of.push_back(i);
    }
    w.requests = i + 1;
  }
  return w;
}

// Calibrates popularity (in units of the noise) and topic_rho as ScoreModelFit documents.
void calibrate_routing(ScoreModelFit& fit, const RoutingMoments& recorded,
                       const std::vector<int64_t>& lengths) {
  const int E = fit.num_experts;
  const int k = fit.top_k;
  const VirtualWorkload w = virtual_workload(lengths, int64_t{1} << 17);
  fit.virtual_tokens = static_cast<int64_t>(w.rows.size());
  const double floor_share = 0.5 / (static_cast<double>(fit.tokens) * k);
  std::vector<double> target(E);
  for (int e = 0; e < E; ++e) target[e] = std::max(recorded.share[e], floor_share);
  std::vector<double> pop(E);
  for (int e = 0; e < E; ++e) pop[e] = fit.popularity[e] / fit.noise_std;  // the moment estimate
  std::vector<float> logits;
  auto model_moments = [&](double rho) {
    ScoreModelConfig c;
    c.skew = Skew::explicit_values(pop);
    c.topic_rho = rho;
    const ScoreModel model(c, E, kFitSeed);
    model.logits(w.rows, logits);
    return routing_moments(logits.data(), static_cast<int64_t>(w.rows.size()), E, k, w.request_of,
                           w.requests);
  };
  // The shares' fixed point at one rho (pop warm-starts from the previous solve).
  auto solve_shares = [&](double rho) {
    RoutingMoments m;
    for (int it = 0; it < 40; ++it) {
      m = model_moments(rho);
      double worst = 0;
      for (int e = 0; e < E; ++e) {
        const double step = std::log(target[e] / std::max(m.share[e], floor_share));
        worst = std::max(worst, std::fabs(step));
        pop[e] += step;
      }
      const double mean = std::accumulate(pop.begin(), pop.end(), 0.0) / E;
      for (double& p : pop) p -= mean;
      if (worst < 1e-3) break;
    }
    return model_moments(rho);
  };
  RoutingMoments lo_m = solve_shares(0.0);
  double lo = 0.0, hi = kMaxFitRho;
  RoutingMoments m = lo_m;
  if (lo_m.dispersion >= recorded.dispersion) {
    fit.rho_clamped = true;
    hi = 0.0;
  } else {
    std::vector<double> pop_lo = pop;
    m = solve_shares(hi);
    if (m.dispersion <= recorded.dispersion) {
      fit.rho_clamped = true;
      lo = hi;
    } else {
      pop = pop_lo;
      for (int step = 0; step < 16; ++step) {
        const double mid = 0.5 * (lo + hi);
        const RoutingMoments mm = solve_shares(mid);
        (mm.dispersion < recorded.dispersion ? lo : hi) = mid;
      }
      m = solve_shares(0.5 * (lo + hi));
    }
  }
  const double rho = fit.rho_clamped ? (hi == 0.0 ? 0.0 : kMaxFitRho) : 0.5 * (lo + hi);
  fit.recorded_share = recorded.share;
  fit.recorded_dispersion = recorded.dispersion;
  fit.model_share = m.share;
  fit.model_dispersion = m.dispersion;
  fit.config.skew = Skew::explicit_values(pop);
  fit.config.topic_rho = rho;
}

}  // namespace

ScoreModelFit fit_score_model(const LogitsMatrix& logits, std::span<const TokenMeta> meta, FitMethod method,
                              int top_k) {
  const int64_t T = logits.rows;
  const int64_t E = logits.cols;
  if (static_cast<int64_t>(meta.size()) != T) {
    throw DataError("the meta has " + std::to_string(meta.size()) + " rows but the logits have " +
                    std::to_string(T));
  }
  if (E < 2) throw DataError("fit needs at least 2 experts (columns), got " + std::to_string(E));
  if (top_k < 1 || top_k > E) {
    throw UsageError("fit: top-k must be in [1, " + std::to_string(E) + "] (the experts), got " +
                     std::to_string(top_k));
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      const float v = logits.values[t * E + e];
      if (!std::isfinite(v)) {
        throw DataError("logit at row " + std::to_string(t) + ", column " + std::to_string(e) +
                        " is not finite (" + format_double(v) + "): fit needs every logit");
      }
    }
  }
  // Requests in order of first appearance; per request its row count and the sum of its centred rows.
  std::unordered_map<uint64_t, size_t> index;
  std::vector<int64_t> count;
  std::vector<double> sum;  // requests x E
  std::vector<double> y(static_cast<size_t>(T * E));
  std::vector<size_t> request_of(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const float* x = logits.values.data() + t * E;
    double mean = 0;
    for (int64_t e = 0; e < E; ++e) mean += x[e];
    mean /= static_cast<double>(E);
    auto [it, added] = index.try_emplace(meta[t].request_id, count.size());
    if (added) {
      count.push_back(0);
      sum.resize(sum.size() + E, 0.0);
    }
    const size_t r = it->second;
    request_of[t] = r;
    ++count[r];
    for (int64_t e = 0; e < E; ++e) {
      y[t * E + e] = x[e] - mean;
      sum[r * E + e] += y[t * E + e];
    }
  }
  const int64_t R = static_cast<int64_t>(count.size());
  if (R < 2) {
    throw DataError("too few requests to estimate a topic: the rows hold " + std::to_string(R) +
                    " request (need at least 2; --meta gives each row's request)");
  }
  int64_t within_dof = 0;
  double inv_n = 0;
  for (int64_t n : count) {
    within_dof += n - 1;
    inv_n += 1.0 / static_cast<double>(n);
  }
  inv_n /= static_cast<double>(R);
  if (within_dof == 0) {
    throw DataError(
        "every request has a single row: no within-request noise to estimate (need a request "
        "with 2 or more rows)");
  }
  std::vector<double> mean_r(sum.size());
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t e = 0; e < E; ++e) mean_r[r * E + e] = sum[r * E + e] / static_cast<double>(count[r]);
  }
  ScoreModelFit fit;
  fit.tokens = T;
  fit.num_experts = static_cast<int>(E);
  fit.requests = R;
  fit.min_request_tokens = fit.max_request_tokens = count[0];
  for (int64_t n : count) {
    fit.min_request_tokens = std::min(fit.min_request_tokens, n);
    fit.max_request_tokens = std::max(fit.max_request_tokens, n);
  }
  fit.popularity.assign(E, 0.0);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t e = 0; e < E; ++e) fit.popularity[e] += mean_r[r * E + e];
  }
  for (double& p : fit.popularity) p /= static_cast<double>(R);
  double ssw = 0;
  for (int64_t t = 0; t < T; ++t) {
    const double* m = mean_r.data() + request_of[t] * E;
    for (int64_t e = 0; e < E; ++e) {
      const double d = y[t * E + e] - m[e];
      ssw += d * d;
    }
  }
  double ssb = 0;
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t e = 0; e < E; ++e) {
      const double d = mean_r[r * E + e] - fit.popularity[e];
      ssb += d * d;
    }
  }
  // Centred per-expert variances are sigma^2 (E - 1) / E; dividing the sums by dof * (E - 1) undoes both.
  const double var_w = ssw / (static_cast<double>(within_dof) * static_cast<double>(E - 1));
  double var_b = ssb / (static_cast<double>(R - 1) * static_cast<double>(E - 1)) - var_w * inv_n;
  if (!(var_b > 0)) {
    var_b = 0;
    fit.topic_clamped = true;
  }
  fit.sigma_w = std::sqrt(var_w);
  fit.sigma_b = std::sqrt(var_b);
  fit.noise_std = std::sqrt(var_w + var_b);
  if (!(fit.noise_std > 0) || !std::isfinite(fit.noise_std)) {
    throw DataError(
        "the centred logits do not vary (every row has the same logits up to a constant): "
        "nothing to fit");
  }
  fit.topic_rho = std::min(1.0, fit.sigma_b / fit.noise_std);
  std::vector<double> pop(E);
  for (int64_t e = 0; e < E; ++e) pop[e] = fit.popularity[e] / fit.noise_std;
  fit.config.name = "fit";
  fit.config.skew = Skew::explicit_values(std::move(pop));
  fit.config.topic_rho = fit.topic_rho;
  fit.config.noise_std = 1.0;
  fit.config.temperature = 1.0 / fit.noise_std;
  fit.method = method;
  fit.top_k = top_k;
  if (method == FitMethod::kRouting) {
    const RoutingMoments recorded =
        routing_moments(logits.values.data(), T, static_cast<int>(E), top_k, request_of, count.size());
    calibrate_routing(fit, recorded, count);
  }
  fit.config.validate();
  return fit;
}

std::string fit_scenario_text(const ScoreModelFit& fit, const FitOptions& options) {
  std::ostringstream s;
  s << "# moe-sim fit: the score model estimated from recorded router logits (docs/cli.md \"moe-sim "
       "fit\").\n";
  s << "#   logits: " << options.logits_path << " (" << fit.tokens << " rows x " << fit.num_experts
    << " experts)\n";
  s << "#   meta:   " << (options.meta_path.empty() ? "none" : options.meta_path) << " (" << fit.requests
    << " requests of " << fit.min_request_tokens << " to " << fit.max_request_tokens << " rows)\n";
  s << "# Estimates in logit units, from row-centred logits:\n";
  s << "#   popularity pop[e] = " << list_text(fit.popularity) << "\n";
  s << "#   between requests (topic) sigma_b = " << format_double(fit.sigma_b)
    << (fit.topic_clamped ? " (the estimate was <= 0: no topic)" : "")
    << ", within (noise) sigma_w = " << format_double(fit.sigma_w) << "\n";
  s << "#   s = sqrt(sigma_b^2 + sigma_w^2) = " << format_double(fit.noise_std)
    << ", topic-rho = sigma_b / s; below, in units of s: popularity = pop / s, noise-std = 1,"
       " temperature = 1 / s\n";
  if (fit.method == FitMethod::kMoments) {
    s << "# Method: moments (the values below are these estimates).\n";
  } else {
    s << "# Method: routing. Popularity and topic-rho below are calibrated so that the model, on "
      << fit.virtual_tokens
      << " virtual tokens of\n#   the recorded request lengths, matches the recording's top-" << fit.top_k
      << " choice shares and per-request dispersion:\n";
    s << "#   recorded shares   " << list_text(fit.recorded_share) << "\n";
    s << "#   model shares      " << list_text(fit.model_share) << "\n";
    s << "#   dispersion        recorded " << format_double(fit.recorded_dispersion) << ", model "
      << format_double(fit.model_dispersion)
      << (fit.rho_clamped ? " (out of the model's reach: topic-rho clamped)" : "") << "\n";
    s << "#   moment estimates  popularity / s = [";
    for (int e = 0; e < fit.num_experts; ++e) {
      s << (e ? ", " : "") << format_double(fit.popularity[e] / fit.noise_std);
    }
    s << "], topic-rho = " << format_double(fit.topic_rho) << "\n";
  }
  s << "# Use: moe-sim run --scenario THIS_FILE [--top-k K --mode M ...]\n";
  s << "experts = " << fit.num_experts << "\n";
  if (!options.trace_out_path.empty()) {
    s << "\n[workload]\n";
    s << "# The recorded requests (" << options.trace_out_path
      << "), planned as one static batch the way replay plans the rows.\n";
    s << "trace = " << toml_string(options.trace_out_path) << "\n";
    s << "token-budget = 0\n";
  }
  s << "\n[scores]\n";
  s << "popularity = " << list_text(fit.config.skew.values) << "\n";
  s << "topic-rho = " << format_double(fit.config.topic_rho) << "\n";
  s << "noise-std = " << format_double(fit.config.noise_std) << "\n";
  s << "temperature = " << format_double(fit.config.temperature) << "\n";
  return s.str();
}

std::string fit_trace_text(std::span<const TokenMeta> meta) {
  std::unordered_map<uint64_t, size_t> index;
  std::vector<uint64_t> ids;
  std::vector<int64_t> count;
  for (const TokenMeta& m : meta) {
    auto [it, added] = index.try_emplace(m.request_id, ids.size());
    if (added) {
      ids.push_back(m.request_id);
      count.push_back(0);
    }
    ++count[it->second];
  }
  std::string out = "request_id,arrival_step,prompt_len,decode_len\n";
  for (size_t i = 0; i < ids.size(); ++i) {
    out += std::to_string(ids[i]) + ",0," + std::to_string(count[i]) + ",0\n";
  }
  return out;
}

int run_fit(const FitOptions& options, std::ostream& out) {
  if (options.logits_path.empty()) throw UsageError("fit needs --logits FILE.npy");
  const LogitsMatrix logits = read_npy_f32(options.logits_path);
  if (!logits.converted_from.empty()) {
    std::cerr << "moe-sim: note: '" << options.logits_path << "' holds " << logits.converted_from
              << " logits; converted them to float32 (round to nearest)\n";
  }
  std::vector<TokenMeta> meta;
  if (options.meta_path.empty()) {
    for (int64_t t = 0; t < logits.rows; ++t) meta.push_back(TokenMeta{0, static_cast<uint32_t>(t)});
  } else {
    meta = read_meta_csv(options.meta_path, logits.rows);
  }
  ScoreModelFit fit;
  try {
    if (options.method != "routing" && options.method != "moments") {
      throw UsageError("fit: unknown method '" + options.method + "' (known: routing, moments)");
    }
    fit = fit_score_model(
        logits, meta, options.method == "moments" ? FitMethod::kMoments : FitMethod::kRouting, options.top_k);
  } catch (const DataError& e) {
    std::string where = " (in '" + options.logits_path + "'";
    if (!options.meta_path.empty()) where += " with '" + options.meta_path + "'";
    throw DataError(std::string(e.what()) + where + ")");
  }
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream f(path);
    if (!f) throw DataError("cannot write '" + path + "'");
    f << text;
    f.flush();
    if (!f) throw DataError("cannot write '" + path + "'");
  };
  if (!options.trace_out_path.empty()) write(options.trace_out_path, fit_trace_text(meta));
  const std::string text = fit_scenario_text(fit, options);
  if (options.out_path.empty()) {
    out << text;
  } else {
    write(options.out_path, text);
  }
  return 0;
}

}  // namespace moe::sim
