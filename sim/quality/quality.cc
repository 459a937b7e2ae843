#include "sim/quality/quality.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

#include "base/splitmix64.h"
#include "moe/model/model.h"
#include "sim/errors.h"
#include "sim/parallel.h"
#include "sim/progress.h"
#include "sim/quality/scored_text.h"
#include "sim/text.h"

namespace moe::sim::quality {
namespace {

void usage(bool ok, const std::string& message) {
  if (!ok) throw UsageError("quality: " + message);
}

double ratio(double num, double den) {
  return den > 0 ? num / den : 0.0;
}

// Stream s of the run's seed: segment s's strangers.
uint64_t segment_seed(uint64_t seed, size_t segment) {
  return mix64(seed ^ mix64(0x7175616cull + segment));
}

}  // namespace

serving::EngineConfig QualityOptions::default_engine() {
  serving::EngineConfig e;  // the divergence lab's server: budget 64, chunks of 16
  e.token_budget = 64;
  e.chunk_size = 16;
  return e;
}

diverge::TrafficConfig QualityOptions::default_traffic() {
  return diverge::TrafficConfig{};  // the lab's strangers (about 46 rows a step)
}

void QualityOptions::validate(int max_positions) const {
  usage(!modes.empty(), "no dispatch modes");
  std::set<std::string> seen;
  for (const std::string& m : modes) {
    usage(m != "dropless", "'dropless' is the reference, always run: leave it out of --modes");
    try {
      model::ModelOptions::dispatch_mode(m, 1.0);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("quality: ") + e.what());
    }
    usage(seen.insert(m).second, "mode '" + m + "' is given twice");
  }
  usage(!overflows.empty(), "no overflow policies");
  usage(std::set<Overflow>(overflows.begin(), overflows.end()).size() == overflows.size(),
        "an overflow policy is given twice");
  usage(!capacity_factors.empty(), "no capacity factors");
  for (size_t i = 0; i < capacity_factors.size(); ++i) {
    try {
      DispatchPolicy::check_capacity_factor(capacity_factors[i]);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("quality: capacity factor: ") + e.what());
    }
    const auto before = capacity_factors.begin() + static_cast<std::ptrdiff_t>(i);
    usage(std::find(capacity_factors.begin(), before, capacity_factors[i]) == before,
          "capacity factor " + format_double(capacity_factors[i]) + " is given twice");
  }
  usage(window >= 1 && window <= max_positions, "window (" + std::to_string(window) + ") must be in [1, " +
                                                    std::to_string(max_positions) +
                                                    "] (the model's max_positions)");
  usage(max_tokens >= 0, "max_tokens (" + std::to_string(max_tokens) + ") must be >= 0 (0: all of the text)");
  usage(windows_per_segment >= 1,
        "windows_per_segment (" + std::to_string(windows_per_segment) + ") must be >= 1");
  usage(arrivals.first_step >= 0 && arrivals.interval >= 0, "arrival steps must be >= 0");
  usage(std::isfinite(tolerance) && tolerance > 0,
        "tolerance (" + format_double(tolerance) + ") must be > 0");
  usage(refine >= 0 && refine <= 10, "refine (" + std::to_string(refine) + ") must be in [0, 10]");
  usage(threads >= 1, "threads (" + std::to_string(threads) + ") must be >= 1");
  try {
    engine.validate();
    traffic.validate();
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("quality: ") + e.what());
  }
  usage(!engine.prefix_cache && engine.spec_tokens == 0,
        "the engine runs without a prefix cache or speculation");
  const int longest =
      (traffic.system_prompts > 0 ? traffic.system_max : 0) + traffic.prompt_max + traffic.decode_max;
  usage(longest <= max_positions,
        "a stranger's system prompt, prompt and generation (" + std::to_string(longest) +
            " tokens at most) exceed the model's max_positions (" + std::to_string(max_positions) + ")");
}

std::string PointSpec::label() const {
  return dropless() ? mode : mode + "/" + std::string(to_string(overflow));
}

double PointResult::perplexity() const {
  return std::exp(ratio(tokens.nll, static_cast<double>(tokens.tokens)));
}
double PointResult::agreement() const {
  return ratio(static_cast<double>(tokens.agree), static_cast<double>(tokens.tokens));
}
double PointResult::accuracy() const {
  return ratio(static_cast<double>(tokens.correct), static_cast<double>(tokens.tokens));
}
double PointResult::kl() const {
  return ratio(tokens.kl, static_cast<double>(tokens.tokens));
}
double PointResult::text_drop_rate() const {
  return ratio(static_cast<double>(counts.text_dropped), static_cast<double>(counts.text_pairs));
}
double PointResult::drop_rate() const {
  return ratio(static_cast<double>(counts.dropped), static_cast<double>(counts.pairs));
}
double PointResult::slots_per_step() const {
  return ratio(static_cast<double>(counts.slots), static_cast<double>(counts.step_layers));
}
double PointResult::kept_per_step() const {
  return ratio(static_cast<double>(counts.kept + counts.rerouted), static_cast<double>(counts.step_layers));
}
double PointResult::peak_per_step() const {
  return ratio(static_cast<double>(counts.peak), static_cast<double>(counts.step_layers));
}
double PointResult::pairs_per_step() const {
  return ratio(static_cast<double>(counts.pairs), static_cast<double>(counts.step_layers));
}
double PointResult::rows_per_step() const {
  return ratio(static_cast<double>(counts.rows), static_cast<double>(counts.steps));
}
double PointResult::text_share() const {
  return ratio(static_cast<double>(counts.text_rows), static_cast<double>(counts.rows));
}

DispatchPolicy point_policy(const PointSpec& spec) {
  DispatchPolicy p =
      model::ModelOptions::dispatch_mode(spec.mode, spec.dropless() ? 1.0 : spec.capacity_factor);
  p.overflow = spec.overflow;
  return p;
}

std::vector<EqualQuality> equal_quality(const PointResult& dropless, const std::vector<PointResult>& points,
                                        double tolerance) {
  std::vector<EqualQuality> out;
  const double limit = dropless.perplexity() * (1.0 + tolerance);
  for (const PointResult& p : points) {
    auto it = std::find_if(out.begin(), out.end(), [&](const EqualQuality& e) {
      return e.mode == p.spec.mode && e.overflow == p.spec.overflow;
    });
    if (it == out.end()) {
      out.push_back(EqualQuality{p.spec.mode, p.spec.overflow, false, {}, 0.0, {}});
      it = out.end() - 1;
    }
    const bool within = p.perplexity() <= limit;
    if (within && (!it->found || p.spec.capacity_factor < it->point.spec.capacity_factor)) {
      it->found = true;
      it->point = p;
    }
  }
  for (EqualQuality& e : out) {  // the grid's factors below the answer are all over the limit
    for (const PointResult& p : points) {
      if (e.found && p.spec.mode == e.mode && p.spec.overflow == e.overflow &&
          p.spec.capacity_factor < e.point.spec.capacity_factor) {
        e.below = std::max(e.below, p.spec.capacity_factor);
      }
    }
  }
  return out;
}

QualityReport run_quality(const QualityOptions& options, const QualityInput& input) {
  if (!input.weights) throw std::invalid_argument("run_quality: no weights");
  const model::ModelShape& shape = input.weights->shape;
  options.validate(shape.max_positions);
  const int V = shape.vocab_size;
  check_vocabulary(input.stream, V, "the text to score (" + input.text_label + ")");
  if (input.stream.size() < 2) throw DataError("the text to score holds fewer than 2 tokens");
  const std::vector<int32_t>& stranger_text = input.stream;
  const bool strangers = options.traffic.arrival_rate > 0.0 || options.traffic.fixed_interval > 0;
  const int need = std::max(options.traffic.prompt_max,
                            options.traffic.system_prompts > 0 ? options.traffic.system_max : 0);
  if (strangers && static_cast<int64_t>(stranger_text.size()) < need) {
    throw DataError("the strangers' prompts are windows of the text, which holds " +
                    std::to_string(stranger_text.size()) + " tokens, fewer than their longest prompt (" +
                    std::to_string(need) + "); give a longer text, or no strangers (--arrival-rate 0)");
  }

  QualityReport report;
  report.options = options;
  report.model_label = input.model_label;
  report.text_label = input.text_label;
  report.stream_tokens = static_cast<int64_t>(input.stream.size());
  const std::vector<Window> windows =
      select_windows(static_cast<int64_t>(input.stream.size()), options.window, options.max_tokens);
  const size_t per = static_cast<size_t>(options.windows_per_segment);
  const size_t num_segments = (windows.size() + per - 1) / per;
  report.windows = static_cast<int64_t>(windows.size());
  report.segments = static_cast<int64_t>(num_segments);

  const PointSpec dropless{"dropless", Overflow::kDrop, 0.0};
  std::vector<PointSpec> grid = {dropless};
  for (const std::string& m : options.modes) {
    for (Overflow o : options.overflows) {
      for (double cf : options.capacity_factors) grid.push_back(PointSpec{m, o, cf});
    }
  }
  diverge::PromptSource source{V, stranger_text, {}};
  if (strangers) source.system = diverge::make_system_prompts(options.traffic, source, options.seed);

  const size_t series = options.modes.size() * options.overflows.size();
  Progress progress(
      "quality",
      static_cast<int64_t>(num_segments * (grid.size() + static_cast<size_t>(options.refine) * (series + 1))),
      options.progress);
  std::mutex progress_mutex;
  // Every point of `specs` (specs[0]: dropless, the reference of the others) over every segment.
  auto evaluate = [&](const std::vector<PointSpec>& specs) {
    struct Partial {
      TokenTotals tokens;
      ServeCounts counts;
    };
    // results[segment][point]: each written by the one worker that runs the segment.
    std::vector<std::vector<Partial>> results(num_segments, std::vector<Partial>(specs.size()));
    parallel_for(options.threads, num_segments, [&](size_t s, int) {
      const size_t first = s * per;
      const std::span<const Window> mine(windows.data() + first, std::min(per, windows.size() - first));
      const Segment segment = make_segment(input.stream, mine, options.arrivals, options.traffic, source,
                                           segment_seed(options.seed, s));
      std::vector<int32_t> targets(static_cast<size_t>(segment.num_tokens));
      for (size_t j = 0; j < mine.size(); ++j) {
        for (int32_t q = 0; q < mine[j].length; ++q) {
          targets[static_cast<size_t>(segment.first_token[j] + q)] =
              input.stream[static_cast<size_t>(mine[j].start + q + 1)];
        }
      }
      Reference reference(segment.num_tokens, V);
      for (size_t p = 0; p < specs.size(); ++p) {
        model::ModelOptions mo;
        mo.kernel = options.kernel;
        mo.compute = options.compute;
        mo.policy = point_policy(specs[p]);
        mo.max_tokens = options.engine.token_budget;
        model::Model m(input.weights, mo);
        Partial& out = results[s][p];
        const bool is_reference = p == 0;
        out.counts = serve_segment(m, segment, options.engine, [&](int64_t token, const float* logits) {
          if (is_reference) reference.store(token, logits);
          score_token(logits, targets[static_cast<size_t>(token)], reference, token, out.tokens);
        });
        std::lock_guard<std::mutex> lock(progress_mutex);
        progress.advance();
      }
    });
    // Totals in segment order: the same sums for any thread count.
    std::vector<PointResult> out(specs.size());
    for (size_t p = 0; p < specs.size(); ++p) {
      out[p].spec = specs[p];
      for (size_t s = 0; s < num_segments; ++s) {
        out[p].tokens.add(results[s][p].tokens);
        out[p].counts.add(results[s][p].counts);
      }
    }
    return out;
  };

  std::vector<PointResult> all = evaluate(grid);
  report.dropless = all.front();
  report.points.assign(all.begin() + 1, all.end());
  report.equal = equal_quality(report.dropless, report.points, options.tolerance);
  // Bisection between each found factor and the largest factor of the grid below it (over the limit).
  const double limit = report.dropless.perplexity() * (1.0 + options.tolerance);
  for (int round = 0; round < options.refine; ++round) {
    std::vector<PointSpec> specs = {dropless};
    std::vector<size_t> which;
    for (size_t i = 0; i < report.equal.size(); ++i) {
      const EqualQuality& e = report.equal[i];
      if (e.below <= 0.0) continue;
      specs.push_back(PointSpec{e.mode, e.overflow, 0.5 * (e.below + e.point.spec.capacity_factor)});
      which.push_back(i);
    }
    if (which.empty()) break;
    const std::vector<PointResult> got = evaluate(specs);
    for (size_t k = 0; k < which.size(); ++k) {
      EqualQuality& e = report.equal[which[k]];
      const PointResult& p = got[k + 1];
      e.refinements.push_back(p);
      if (p.perplexity() <= limit) {
        e.point = p;
      } else {
        e.below = p.spec.capacity_factor;
      }
    }
  }
  return report;
}

}  // namespace moe::sim::quality
