#include "sim/quality/report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sim/svg_plot.h"
#include "sim/text.h"

namespace moe::sim::quality {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string percent(double share, int decimals = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%%", decimals, 100.0 * share);
  return buf;
}

// Perplexity relative to dropless, as a signed percentage.
double change(const PointResult& p, const PointResult& dropless) {
  return p.perplexity() / dropless.perplexity() - 1.0;
}

std::string signed_percent(double share) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%+.2f%%", 100.0 * share);
  return buf;
}

// Slots per step over the batch's pairs per step: the capacity the policy took, as an effective capacity
// factor (batch scope: about cf; scopes that pool per request offer more).
double slots_per_pair(const PointResult& p) {
  return p.counts.pairs > 0 ? static_cast<double>(p.counts.slots) / static_cast<double>(p.counts.pairs) : 0.0;
}

// A capacity factor with two decimals, or all it needs.
std::string cf_text(double cf) {
  const std::string two = fmt("%.2f", cf);
  return std::stod(two) == cf ? two : format_double(cf);
}

std::string pad(const std::string& s, size_t width, bool left = false) {
  if (s.size() >= width) return s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

nlohmann::ordered_json point_json(const PointResult& p, const PointResult& dropless) {
  nlohmann::ordered_json j;
  j["mode"] = p.spec.mode;
  if (p.spec.dropless()) {
    j["overflow"] = nullptr;
    j["capacity_factor"] = nullptr;
  } else {
    j["overflow"] = std::string(to_string(p.spec.overflow));
    j["capacity_factor"] = p.spec.capacity_factor;
  }
  j["perplexity"] = p.perplexity();
  j["perplexity_change"] = change(p, dropless);
  j["agreement"] = p.agreement();
  j["accuracy"] = p.accuracy();
  j["kl"] = p.kl();
  j["text_drop_rate"] = p.text_drop_rate();
  j["drop_rate"] = p.drop_rate();
  if (p.spec.dropless()) {
    j["slots_per_step"] = nullptr;
    j["slots_per_pair"] = nullptr;
  } else {
    j["slots_per_step"] = p.slots_per_step();
    j["slots_per_pair"] = slots_per_pair(p);
  }
  j["kept_per_step"] = p.kept_per_step();
  j["peak_per_step"] = p.peak_per_step();
  j["pairs_per_step"] = p.pairs_per_step();
  j["predictions"] = p.tokens.tokens;
  j["nll"] = p.tokens.nll;
  j["steps"] = p.counts.steps;
  j["rows"] = p.counts.rows;
  j["text_rows"] = p.counts.text_rows;
  j["pairs"] = p.counts.pairs;
  j["kept"] = p.counts.kept;
  j["rerouted"] = p.counts.rerouted;
  j["dropped"] = p.counts.dropped;
  j["text_pairs"] = p.counts.text_pairs;
  j["text_dropped"] = p.counts.text_dropped;
  j["slots"] = p.counts.slots;
  j["peak"] = p.counts.peak;
  return j;
}

}  // namespace

std::string format_table(const QualityReport& r) {
  const QualityOptions& o = r.options;
  const PointResult& d = r.dropless;
  std::ostringstream out;
  out << "model: " << r.model_label << "\n";
  out << "text: " << r.text_label << ", " << r.stream_tokens << " tokens; " << d.tokens.tokens
      << " predictions scored in " << r.windows << " windows of up to " << o.window << " ("
      << (o.max_tokens == 0 ? "all" : "evenly spread") << "), " << r.segments << " serving runs of "
      << o.windows_per_segment << " windows\n";
  out << "serving: budget " << o.engine.token_budget << " rows/step, chunk " << o.engine.chunk_size
      << "; a window every " << o.arrivals.interval << " steps from step " << o.arrivals.first_step
      << " among strangers (" << format_double(o.traffic.arrival_rate) << "/step"
      << (o.traffic.fixed_interval > 0 ? ", fixed interval " + std::to_string(o.traffic.fixed_interval) : "")
      << "); " << fmt("%.1f", d.rows_per_step()) << " rows/step (" << fmt("%.1f", d.pairs_per_step())
      << " pairs per MoE layer), " << percent(d.text_share(), 1) << " of them scored; kernels "
      << kernels::to_string(o.kernel) << ", expert compute " << kernels::to_string(o.compute) << "; seed "
      << o.seed << "\n";
  const char* head[] = {"policy",    "cf",         "perplexity", "vs dropless", "top-1 agree", "KL nats",
                        "text drop", "batch drop", "kept/step",  "peak/step",   "slots/step"};
  const size_t w[] = {18, 6, 11, 12, 12, 10, 10, 11, 10, 10, 11};
  auto row = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) out << pad(cells[i], w[i], i == 0);
    out << "\n";
  };
  row(std::vector<std::string>(std::begin(head), std::end(head)));
  auto point_row = [&](const PointResult& p) {
    const bool dl = p.spec.dropless();
    row({p.spec.label(), dl ? "-" : cf_text(p.spec.capacity_factor), fmt("%.4f", p.perplexity()),
         dl ? "-" : signed_percent(change(p, d)), percent(p.agreement()), fmt("%.5f", p.kl()),
         percent(p.text_drop_rate()), percent(p.drop_rate()), fmt("%.1f", p.kept_per_step()),
         fmt("%.1f", p.peak_per_step()), dl ? "-" : fmt("%.1f", p.slots_per_step())});
  };
  point_row(d);
  for (const PointResult& p : r.points) point_row(p);
  out << "\nequal quality: the smallest capacity factor within " << format_double(100.0 * o.tolerance)
      << "% of dropless perplexity (" << fmt("%.4f", d.perplexity()) << ", at most "
      << fmt("%.4f", d.perplexity() * (1.0 + o.tolerance)) << ")";
  if (o.refine > 0) out << ", refined by " << o.refine << " bisection steps below the grid's";
  out << "\n(cf: the smallest factor run that is within; over at: the largest factor run below it, which is "
         "not)\n";
  const size_t ew[] = {18, 8, 9, 11, 12, 10, 10, 11};
  auto erow = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) out << pad(cells[i], ew[i], i == 0);
    out << "\n";
  };
  erow({"policy", "cf", "over at", "perplexity", "vs dropless", "kept/step", "peak/step", "slots/step"});
  for (const EqualQuality& e : r.equal) {
    const std::string label = e.mode + "/" + std::string(to_string(e.overflow));
    if (!e.found) {
      double largest = 0;
      for (double cf : o.capacity_factors) largest = std::max(largest, cf);
      out << pad(label, ew[0], true) << "  none up to cf " << format_double(largest) << "\n";
      continue;
    }
    const PointResult& p = e.point;
    erow({label, format_double(p.spec.capacity_factor), e.below > 0 ? format_double(e.below) : "-",
          fmt("%.4f", p.perplexity()), signed_percent(change(p, d)), fmt("%.1f", p.kept_per_step()),
          fmt("%.1f", p.peak_per_step()), fmt("%.1f", p.slots_per_step())});
  }
  return out.str();
}

std::string to_json(const QualityReport& r) {
  const QualityOptions& o = r.options;
  nlohmann::ordered_json j;
  j["command"] = "quality";
  j["model"] = r.model_label;
  j["text"] = {{"source", r.text_label},
               {"tokens", r.stream_tokens},
               {"window", o.window},
               {"max_tokens", o.max_tokens},
               {"windows", r.windows},
               {"predictions", r.dropless.tokens.tokens},
               {"windows_per_segment", o.windows_per_segment},
               {"segments", r.segments}};
  j["serving"] = {{"token_budget", o.engine.token_budget},
                  {"chunk_size", o.engine.chunk_size},
                  {"first_window_step", o.arrivals.first_step},
                  {"window_interval", o.arrivals.interval},
                  {"arrival_rate", o.traffic.arrival_rate},
                  {"fixed_interval", o.traffic.fixed_interval},
                  {"prompt_len", {o.traffic.prompt_min, o.traffic.prompt_max}},
                  {"decode_len", {o.traffic.decode_min, o.traffic.decode_max}},
                  {"system_prompts", o.traffic.system_prompts},
                  {"system_prompt_len", {o.traffic.system_min, o.traffic.system_max}},
                  {"system_share", o.traffic.system_share},
                  {"kernel", std::string(kernels::to_string(o.kernel))},
                  {"compute", std::string(kernels::to_string(o.compute))},
                  {"seed", o.seed}};
  j["tolerance"] = o.tolerance;
  j["refine"] = o.refine;
  nlohmann::ordered_json points = nlohmann::ordered_json::array();
  points.push_back(point_json(r.dropless, r.dropless));
  for (const PointResult& p : r.points) points.push_back(point_json(p, r.dropless));
  j["points"] = points;
  nlohmann::ordered_json equal = nlohmann::ordered_json::array();
  for (const EqualQuality& e : r.equal) {
    nlohmann::ordered_json q;
    q["mode"] = e.mode;
    q["overflow"] = std::string(to_string(e.overflow));
    q["found"] = e.found;
    q["below"] = e.below > 0 ? nlohmann::ordered_json(e.below) : nlohmann::ordered_json(nullptr);
    q["point"] = e.found ? point_json(e.point, r.dropless) : nlohmann::ordered_json(nullptr);
    nlohmann::ordered_json refinements = nlohmann::ordered_json::array();
    for (const PointResult& p : e.refinements) refinements.push_back(point_json(p, r.dropless));
    q["refinements"] = refinements;
    equal.push_back(q);
  }
  j["equal_quality"] = equal;
  return j.dump(2) + "\n";
}

std::string to_csv(const QualityReport& r) {
  std::ostringstream out;
  out << "mode,overflow,capacity_factor,perplexity,perplexity_change,agreement,accuracy,kl,text_drop_rate,"
         "drop_rate,slots_per_step,slots_per_pair,kept_per_step,peak_per_step,predictions,steps,rows,text_"
         "rows,"
         "pairs,kept,rerouted,dropped,text_pairs,text_dropped,slots,peak\n";
  auto line = [&](const PointResult& p) {
    const bool dl = p.spec.dropless();
    const ServeCounts& c = p.counts;
    out << p.spec.mode << "," << (dl ? "" : std::string(to_string(p.spec.overflow))) << ","
        << (dl ? "" : format_double(p.spec.capacity_factor)) << "," << format_double(p.perplexity()) << ","
        << format_double(change(p, r.dropless)) << "," << format_double(p.agreement()) << ","
        << format_double(p.accuracy()) << "," << format_double(p.kl()) << ","
        << format_double(p.text_drop_rate()) << "," << format_double(p.drop_rate()) << ","
        << (dl ? "" : format_double(p.slots_per_step())) << ","
        << (dl ? "" : format_double(slots_per_pair(p))) << "," << format_double(p.kept_per_step()) << ","
        << format_double(p.peak_per_step()) << "," << p.tokens.tokens << "," << c.steps << "," << c.rows
        << "," << c.text_rows << "," << c.pairs << "," << c.kept << "," << c.rerouted << "," << c.dropped
        << "," << c.text_pairs << "," << c.text_dropped << "," << c.slots << "," << c.peak << "\n";
  };
  line(r.dropless);
  for (const PointResult& p : r.points) line(p);
  return out.str();
}

std::string to_svg(const QualityReport& r) {
  const QualityOptions& o = r.options;
  LinePlot plot;
  plot.title = "Held-out perplexity against capacity factor (" + r.model_label + ")";
  plot.x_label = "capacity factor";
  plot.y_label = "perplexity (" + std::to_string(r.dropless.tokens.tokens) + " predictions)";
  plot.description = "moe-sim quality: " + r.text_label + ", windows of " + std::to_string(o.window) +
                     ", budget " + std::to_string(o.engine.token_budget) + ", chunk " +
                     std::to_string(o.engine.chunk_size) + ", seed " + std::to_string(o.seed);
  plot.y_from_zero = false;
  plot.nested_markers = true;
  double lo = 1e300, hi = -1e300;
  for (double cf : o.capacity_factors) lo = std::min(lo, cf), hi = std::max(hi, cf);
  const double base = r.dropless.perplexity();
  plot.series.push_back({"dropless", {lo, hi}, {base, base}, true});
  plot.series.push_back({"dropless + " + format_double(100.0 * o.tolerance) + "%",
                         {lo, hi},
                         {base * (1.0 + o.tolerance), base * (1.0 + o.tolerance)},
                         true});
  for (const std::string& m : o.modes) {
    for (Overflow ov : o.overflows) {
      std::vector<std::pair<double, double>> xy;  // by capacity factor, whatever order they were given in
      for (const PointResult& p : r.points) {
        if (p.spec.mode == m && p.spec.overflow == ov)
          xy.emplace_back(p.spec.capacity_factor, p.perplexity());
      }
      for (const EqualQuality& e : r.equal) {  // the refinement's midpoints too
        if (e.mode != m || e.overflow != ov) continue;
        for (const PointResult& p : e.refinements) xy.emplace_back(p.spec.capacity_factor, p.perplexity());
      }
      std::sort(xy.begin(), xy.end());
      PlotSeries s{m + "/" + std::string(to_string(ov)), {}, {}};
      for (const auto& [x, y] : xy) s.x.push_back(x), s.y.push_back(y);
      plot.series.push_back(std::move(s));
    }
  }
  return render_svg(plot);
}

}  // namespace moe::sim::quality
