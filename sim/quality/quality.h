// What a capacity factor costs in quality (`moe-sim quality`, docs/cli.md): held-out text scored by the
// trained model under every dispatch mode x capacity factor x overflow, served among stranger traffic by the
// serving engine, against the dropless run of the same steps.
//
// The text's windows (scored_text.h) are split into segments of a few windows; each segment is one serving
// run per policy (segment.h) with its own strangers, the same steps for every policy. A segment's dropless
// run comes first and keeps its predictions (metrics.h, Reference); each policy's predictions are scored
// against the targets and against them. Segments run in parallel (`threads`, one single-threaded Model per
// run) and their totals are added in segment order, so the report is the same for any thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/linear.h"
#include "moe/model/model_weights.h"
#include "router/dispatch_policy.h"
#include "sim/diverge/traffic.h"
#include "sim/quality/metrics.h"
#include "sim/quality/segment.h"
#include "sim/serving/engine.h"

namespace moe::sim::quality {

struct QualityOptions {
  // The policies: every mode (a model::ModelOptions::dispatch_mode name other than dropless) x overflow x
  // capacity factor; dropless is always run (the reference).
  std::vector<std::string> modes = {"greedy", "stable"};
  std::vector<Overflow> overflows = {Overflow::kDrop, Overflow::kReroute};
  std::vector<double> capacity_factors = {0.75, 1.0, 1.25, 1.5, 2.0};
  int window = 256;            // inputs per scored window (at most the model's max_positions)
  int64_t max_tokens = 16384;  // predictions scored: an evenly spread sample of windows (0: all of the text)
  int windows_per_segment = 16;
  Arrivals arrivals;
  serving::EngineConfig engine = default_engine();
  diverge::TrafficConfig traffic = default_traffic();
  kernels::KernelKind kernel = kernels::KernelKind::kInvariant;
  kernels::ComputePrecision compute = kernels::ComputePrecision::kF32;
  double tolerance = 0.01;  // the equal-quality comparison: perplexity within this share of dropless
  // Bisection steps that refine each equal-quality factor between it and the grid's factor below it.
  int refine = 2;
  uint64_t seed = 1;  // the strangers of segment s: stream (seed, s); the system prompts: seed
  int threads = 1;
  bool progress = false;  // a progress bar on stderr (when it is a terminal)

  // Throws UsageError naming the bad field (an empty or unknown mode, an impossible capacity factor, ...).
  void validate(int max_positions) const;
  static serving::EngineConfig default_engine();
  static diverge::TrafficConfig default_traffic();
};

// One policy: mode, overflow, capacity factor (dropless: mode "dropless", capacity factor 0).
struct PointSpec {
  std::string mode;
  Overflow overflow = Overflow::kDrop;
  double capacity_factor = 0.0;
  bool dropless() const { return mode == "dropless"; }
  std::string label() const;  // "greedy/drop", "stable/reroute", "dropless"
};

struct PointResult {
  PointSpec spec;
  TokenTotals tokens;
  ServeCounts counts;

  double perplexity() const;
  double agreement() const;  // share of predictions whose argmax is the dropless run's
  double accuracy() const;   // share whose argmax is the target
  double kl() const;         // mean KL(dropless || this), nats per prediction
  double text_drop_rate() const;
  double drop_rate() const;       // every row of the batch
  double slots_per_step() const;  // per MoE layer and step, summed over the experts (dropless: 0)
  double kept_per_step() const;   // pairs an expert computed (kept + rerouted), per MoE layer and step
  double peak_per_step() const;   // experts x the busiest expert's load, per MoE layer and step
  double pairs_per_step() const;  // the batch's (token, choice) pairs, per MoE layer and step
  double rows_per_step() const;
  double text_share() const;  // scored rows over all rows
};

// Per mode and overflow: the smallest capacity factor whose perplexity is within `tolerance` of dropless
// (found false: no factor of the grid is), with its point. run_quality refines the grid's answer by
// bisection (QualityOptions::refine steps) between it and the grid's next smaller factor, which is over the
// limit: each midpoint within the limit becomes the answer, one over it the new lower end. `refinements`
// holds the midpoints run, in order; `below` the largest factor run below the answer (over the limit; 0:
// none), so the smallest factor within the limit lies in (below, answer]. Perplexity is assumed to fall with
// the capacity factor inside that interval (the grid's points show whether it does).
struct EqualQuality {
  std::string mode;
  Overflow overflow = Overflow::kDrop;
  bool found = false;
  PointResult point;
  double below = 0.0;
  std::vector<PointResult> refinements;
};

struct QualityInput {
  std::shared_ptr<const model::ModelWeights> weights;
  std::vector<int32_t> stream;  // the text to score, as tokens; the strangers' prompts are windows of it too
  std::string model_label;      // "models/kjv-moe"
  std::string text_label;       // "held-out KJV (heldout.txt)", a file name
};

struct QualityReport {
  QualityOptions options;
  std::string model_label, text_label;
  int64_t stream_tokens = 0;
  int64_t windows = 0, segments = 0;
  PointResult dropless;
  std::vector<PointResult> points;  // mode-major, then overflow, then capacity factor (the options' orders)
  std::vector<EqualQuality> equal;  // per mode and overflow
};

// The policy of a point (model::ModelOptions::dispatch_mode, with the overflow).
DispatchPolicy point_policy(const PointSpec& spec);

// Runs the experiment. Throws UsageError for invalid options, DataError for a text that does not fit them
// (shorter than the strangers' prompts, tokens outside the vocabulary).
QualityReport run_quality(const QualityOptions& options, const QualityInput& input);

// The equal-quality rows of a grid's points, before refinement: per mode and overflow, the smallest factor
// within the tolerance.
std::vector<EqualQuality> equal_quality(const PointResult& dropless, const std::vector<PointResult>& points,
                                        double tolerance);

}  // namespace moe::sim::quality
