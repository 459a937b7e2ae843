#include "sim/diverge/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "sim/svg_plot.h"

namespace moe::sim::diverge {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string tick_text(double v) {
  char buf[32];
  if (std::fabs(v - std::round(v)) < 1e-9) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2g", v);
  }
  return buf;
}

double nice_ceiling(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * p >= v) return m * p;
  }
  return 10 * p;
}

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                          "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"};

}  // namespace

std::string render_chart(const Chart& chart) {
  const double width = 760, height = 460;
  const double left = 70, right = 220, top = 60, bottom = 60;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  auto tx = [&](double x) { return chart.log2_x ? std::log2(x) : x; };
  double x_min = 0, x_max = 1, y_max = 0;
  bool first = true;
  for (const auto& s : chart.series) {
    for (size_t i = 0; i < s.x.size(); ++i) {
      const double x = tx(s.x[i]);
      if (first) x_min = x_max = x;
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      y_max = std::max(y_max, s.y[i]);
      first = false;
    }
  }
  if (x_max <= x_min) x_max = x_min + 1;
  y_max = nice_ceiling(y_max);
  auto px = [&](double x) { return left + (tx(x) - x_min) / (x_max - x_min) * plot_w; };
  auto py = [&](double y) { return top + plot_h - y / y_max * plot_h; };

  std::string o;
  o += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + num(width) + "\" height=\"" +
       num(height) + "\" viewBox=\"0 0 " + num(width) + " " + num(height) +
       "\" font-family=\"sans-serif\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"" + num(width / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">" +
       moe::sim::xml_escape(chart.title) + "</text>\n";
  if (!chart.note.empty()) {
    o += "<text x=\"" + num(width / 2) +
         "\" y=\"42\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555\">" +
         moe::sim::xml_escape(chart.note) + "</text>\n";
  }
  // Axes and grid.
  o += "<g stroke=\"#000\" stroke-width=\"1\">\n";
  o += "<line x1=\"" + num(left) + "\" y1=\"" + num(top + plot_h) + "\" x2=\"" + num(left + plot_w) +
       "\" y2=\"" + num(top + plot_h) + "\"/>\n";
  o += "<line x1=\"" + num(left) + "\" y1=\"" + num(top) + "\" x2=\"" + num(left) + "\" y2=\"" +
       num(top + plot_h) + "\"/>\n</g>\n";
  o += "<g font-size=\"11\">\n";
  for (int i = 0; i <= 5; ++i) {
    const double y = y_max * i / 5;
    o += "<line x1=\"" + num(left) + "\" y1=\"" + num(py(y)) + "\" x2=\"" + num(left + plot_w) + "\" y2=\"" +
         num(py(y)) + "\" stroke=\"#ddd\"/>\n";
    o += "<text x=\"" + num(left - 6) + "\" y=\"" + num(py(y) + 4) + "\" text-anchor=\"end\">" +
         tick_text(y) + "</text>\n";
  }
  // x ticks at the distinct x values of the first series (they share x values here).
  if (!chart.series.empty()) {
    for (double x : chart.series.front().x) {
      o += "<line x1=\"" + num(px(x)) + "\" y1=\"" + num(top + plot_h) + "\" x2=\"" + num(px(x)) +
           "\" y2=\"" + num(top + plot_h + 5) + "\" stroke=\"#000\"/>\n";
      o += "<text x=\"" + num(px(x)) + "\" y=\"" + num(top + plot_h + 18) + "\" text-anchor=\"middle\">" +
           tick_text(x) + "</text>\n";
    }
  }
  o += "</g>\n";
  o += "<text x=\"" + num(left + plot_w / 2) + "\" y=\"" + num(height - 16) +
       "\" text-anchor=\"middle\" font-size=\"13\">" + moe::sim::xml_escape(chart.x_label) + "</text>\n";
  o += "<text x=\"18\" y=\"" + num(top + plot_h / 2) +
       "\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 18 " + num(top + plot_h / 2) +
       ")\">" + moe::sim::xml_escape(chart.y_label) + "</text>\n";
  // Series.
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const Series& ser = chart.series[s];
    const char* color = kPalette[s % (sizeof(kPalette) / sizeof(kPalette[0]))];
    std::string points;
    for (size_t i = 0; i < ser.x.size(); ++i) {
      if (i) points += ' ';
      points += num(px(ser.x[i]));
      points += ',';
      points += num(py(ser.y[i]));
    }
    o += "<polyline class=\"series\" fill=\"none\" stroke=\"" + std::string(color) +
         "\" stroke-width=\"2\" points=\"" + points + "\"><title>" + moe::sim::xml_escape(ser.name) +
         "</title></polyline>\n";
    for (size_t i = 0; i < ser.x.size(); ++i) {
      o += "<circle cx=\"" + num(px(ser.x[i])) + "\" cy=\"" + num(py(ser.y[i])) + "\" r=\"3\" fill=\"" +
           color + "\"/>\n";
    }
    const double ly = top + 10 + 18 * static_cast<double>(s);
    o += "<line x1=\"" + num(left + plot_w + 15) + "\" y1=\"" + num(ly) + "\" x2=\"" +
         num(left + plot_w + 35) + "\" y2=\"" + num(ly) + "\" stroke=\"" + color +
         "\" stroke-width=\"2\"/>\n";
    o += "<text x=\"" + num(left + plot_w + 40) + "\" y=\"" + num(ly + 4) + "\" font-size=\"11\">" +
         moe::sim::xml_escape(ser.name) + "</text>\n";
  }
  o += "</svg>\n";
  return o;
}

}  // namespace moe::sim::diverge
