#include "sim/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "sim/text.h"

namespace moe::sim {
namespace {

constexpr double kWidth = 800, kHeight = 500;
constexpr double kLeft = 80, kRight = 220, kTop = 50, kBottom = 60;
// Dash patterns cycle with the colours so that coinciding series (greedy and rank-only drop the same number
// of pairs under batch scope) stay distinguishable.
const char* const kDashes[] = {"none", "8 4", "2 3", "12 3 2 3"};
const char* const kPalette[] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// A step of 1, 2 or 5 times a power of ten giving about `target` intervals over `span`.
double nice_step(double span, int target) {
  if (!(span > 0)) return 1.0;
  const double raw = span / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10.0 * p;
}

std::string tick_label(double v, double step) {
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string render_svg(const LinePlot& plot) {
  double x_min = 1e300, x_max = -1e300, y_max = 0.0, y_low = 1e300;
  for (const auto& s : plot.series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      x_min = std::min(x_min, s.x[i]);
      x_max = std::max(x_max, s.x[i]);
      y_max = std::max(y_max, s.y[i]);
      y_low = std::min(y_low, s.y[i]);
    }
  }
  if (x_min > x_max) x_min = 0, x_max = 1;
  if (x_max == x_min) x_min -= 0.5, x_max += 0.5;
  // The y range: [0, a nice top], or [a nice bottom, a nice top] around the data.
  double y_bottom = 0.0, y_step, y_top;
  if (plot.y_from_zero || !(y_low < 1e300)) {
    y_step = nice_step(y_max > 0 ? y_max : 1.0, 5);
    y_top = y_max > 0 ? std::ceil(y_max / y_step - 1e-9) * y_step : 1.0;
  } else {
    if (y_max == y_low) y_low -= 0.5, y_max += 0.5;
    y_step = nice_step(y_max - y_low, 5);
    y_bottom = std::floor(y_low / y_step + 1e-9) * y_step;
    y_top = std::ceil(y_max / y_step - 1e-9) * y_step;
  }
  const double x_step = nice_step(x_max - x_min, 8);
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x_min) / (x_max - x_min) * pw; };
  auto py = [&](double y) { return kTop + ph - (y - y_bottom) / (y_top - y_bottom) * ph; };

  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" << kWidth << "\" height=\""
    << kHeight << "\" viewBox=\"0 0 " << kWidth << " " << kHeight
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<title>" << xml_escape(plot.title) << "</title>\n"
    << "<desc>" << xml_escape(plot.description) << "</desc>\n"
    << "<rect x=\"0\" y=\"0\" width=\"" << kWidth << "\" height=\"" << kHeight << "\" fill=\"white\"/>\n"
    << "<text x=\"" << num(kLeft + pw / 2) << "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">"
    << xml_escape(plot.title) << "</text>\n";
  // Grid and ticks.
  o << "<g class=\"y-ticks\" stroke=\"#dddddd\">\n";
  for (double y = y_bottom; y <= y_top + y_step * 1e-6; y += y_step) {
    o << "<line x1=\"" << num(kLeft) << "\" y1=\"" << num(py(y)) << "\" x2=\"" << num(kLeft + pw)
      << "\" y2=\"" << num(py(y)) << "\"/>\n";
    o << "<text x=\"" << num(kLeft - 8) << "\" y=\"" << num(py(y) + 4)
      << "\" text-anchor=\"end\" stroke=\"none\">" << tick_label(y, y_step) << "</text>\n";
  }
  o << "</g>\n<g class=\"x-ticks\" stroke=\"#dddddd\">\n";
  for (double x = std::ceil(x_min / x_step - 1e-9) * x_step; x <= x_max + x_step * 1e-6; x += x_step) {
    o << "<line x1=\"" << num(px(x)) << "\" y1=\"" << num(kTop) << "\" x2=\"" << num(px(x)) << "\" y2=\""
      << num(kTop + ph) << "\"/>\n";
    o << "<text x=\"" << num(px(x)) << "\" y=\"" << num(kTop + ph + 18)
      << "\" text-anchor=\"middle\" stroke=\"none\">" << tick_label(x, x_step) << "</text>\n";
  }
  o << "</g>\n";
  // Axes and labels.
  o << "<g class=\"axes\" stroke=\"black\">\n"
    << "<line x1=\"" << num(kLeft) << "\" y1=\"" << num(kTop + ph) << "\" x2=\"" << num(kLeft + pw)
    << "\" y2=\"" << num(kTop + ph) << "\"/>\n"
    << "<line x1=\"" << num(kLeft) << "\" y1=\"" << num(kTop) << "\" x2=\"" << num(kLeft) << "\" y2=\""
    << num(kTop + ph) << "\"/>\n</g>\n"
    << "<text x=\"" << num(kLeft + pw / 2) << "\" y=\"" << num(kHeight - 15) << "\" text-anchor=\"middle\">"
    << xml_escape(plot.x_label) << "</text>\n"
    << "<text x=\"20\" y=\"" << num(kTop + ph / 2) << "\" text-anchor=\"middle\" transform=\"rotate(-90 20 "
    << num(kTop + ph / 2) << ")\">" << xml_escape(plot.y_label) << "</text>\n";
  // Series.
  auto color_of = [&](size_t i) {
    return plot.series[i].reference ? "#888888" : kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
  };
  auto width_of = [&](size_t i) { return plot.series[i].reference ? "1" : "2"; };
  for (size_t i = 0; i < plot.series.size(); ++i) {
    const auto& s = plot.series[i];
    const char* color = color_of(i);
    o << "<g class=\"series-group\">\n<polyline class=\"series\" data-series=\"" << xml_escape(s.name)
      << "\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"" << width_of(i)
      << "\" stroke-dasharray=\"" << kDashes[i % 4] << "\" points=\"";
    for (size_t p = 0; p < s.x.size() && p < s.y.size(); ++p) {
      o << (p ? " " : "") << num(px(s.x[p])) << "," << num(py(s.y[p]));
    }
    o << "\"/>\n";
    // Nested: 1.5 larger for every later series with markers.
    double r = 3.0;
    for (size_t later = i + 1; plot.nested_markers && later < plot.series.size(); ++later) {
      if (!plot.series[later].reference) r += 1.5;
    }
    for (size_t p = 0; p < s.x.size() && p < s.y.size() && !s.reference; ++p) {
      o << "<circle cx=\"" << num(px(s.x[p])) << "\" cy=\"" << num(py(s.y[p])) << "\" r=\""
        << format_double(r) << "\" fill=\"" << color << "\"><title>" << xml_escape(s.name) << ": "
        << format_double(s.x[p]) << ", " << format_double(s.y[p]) << "</title></circle>\n";
    }
    o << "</g>\n";
  }
  // Legend.
  o << "<g class=\"legend\">\n";
  for (size_t i = 0; i < plot.series.size(); ++i) {
    const double y = kTop + 10 + 20.0 * static_cast<double>(i);
    const double x = kLeft + pw + 20;
    const char* color = color_of(i);
    o << "<line x1=\"" << num(x) << "\" y1=\"" << num(y) << "\" x2=\"" << num(x + 24) << "\" y2=\"" << num(y)
      << "\" stroke=\"" << color << "\" stroke-width=\"" << width_of(i) << "\" stroke-dasharray=\""
      << kDashes[i % 4] << "\"/>\n"
      << "<text x=\"" << num(x + 30) << "\" y=\"" << num(y + 4) << "\">" << xml_escape(plot.series[i].name)
      << "</text>\n";
  }
  o << "</g>\n</svg>\n";
  return o.str();
}

}  // namespace moe::sim
