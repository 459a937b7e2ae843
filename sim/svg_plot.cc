#include "sim/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "sim/text.h"

namespace moe::sim {
namespace {

constexpr double kPlotWidth = 500, kPlotHeight = 340;
constexpr double kLeft = 80, kTop = 66, kBottom = 62, kLegendGap = 20;
// Label widths are estimated at this many ems per character (wider than the average sans-serif glyph), so
// that the canvas is laid out to hold them.
constexpr double kEmPerChar = 0.62;
// Dash patterns and markers cycle with the colours, so that series that share segments or points stay
// distinguishable.
const char* const kDashes[] = {"none", "8 4", "2 3", "12 3 2 3"};
const char* const kPalette[] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr int kMarkers = 5;  // circle, square, triangle, diamond, down-triangle

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

double text_width(const std::string& text, double font_size) {
  return kEmPerChar * font_size * static_cast<double>(text.size());
}

// A marker of shape `shape` (kMarkers of them) and radius r at (x, y).
std::string marker(int shape, double x, double y, double r, const char* color, const std::string& title) {
  std::string o;
  auto poly = [&](std::initializer_list<std::pair<double, double>> pts) {
    std::string points;
    for (const auto& [dx, dy] : pts) {
      if (!points.empty()) points += ' ';
      points += num(x + dx * r);
      points += ',';
      points += num(y + dy * r);
    }
    return "<polygon points=\"" + points + "\" fill=\"" + color + "\">";
  };
  switch (shape) {
    case 0:
      o = "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + format_double(r) + "\" fill=\"" +
          color + "\">";
      return o + "<title>" + title + "</title></circle>\n";
    case 1:
      o = poly({{-0.9, -0.9}, {0.9, -0.9}, {0.9, 0.9}, {-0.9, 0.9}});
      break;
    case 2:
      o = poly({{0, -1.2}, {1.1, 0.8}, {-1.1, 0.8}});
      break;
    case 3:
      o = poly({{0, -1.3}, {1.3, 0}, {0, 1.3}, {-1.3, 0}});
      break;
    default:
      o = poly({{0, 1.2}, {1.1, -0.8}, {-1.1, -0.8}});
  }
  return o + "<title>" + title + "</title></polygon>\n";
}

// A series as drawn: the plot's series with the same points, drawn once and named together.
struct Drawn {
  PlotSeries points;
  std::vector<std::string> names;
  std::string joined() const {
    std::string out;
    for (const std::string& n : names) {
      if (!out.empty()) out += " = ";
      out += n;
    }
    return out;
  }
};

std::vector<Drawn> drawn_series(const std::vector<PlotSeries>& series) {
  std::vector<Drawn> out;
  for (const PlotSeries& s : series) {
    auto same = std::find_if(out.begin(), out.end(), [&](const Drawn& d) {
      return d.points.reference == s.reference && d.points.x == s.x && d.points.y == s.y;
    });
    if (same == out.end()) {
      out.push_back(Drawn{s, {s.name}});
    } else {
      same->names.push_back(s.name);
    }
  }
  return out;
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
  const std::vector<Drawn> drawn = drawn_series(plot.series);
  auto tx = [&](double x) { return plot.log2_x ? std::log2(x) : x; };
  double x_min = 1e300, x_max = -1e300, y_max = 0.0, y_low = 1e300;
  std::vector<double> xs;  // the data's distinct x values
  for (const Drawn& d : drawn) {
    const PlotSeries& s = d.points;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      x_min = std::min(x_min, tx(s.x[i]));
      x_max = std::max(x_max, tx(s.x[i]));
      y_max = std::max(y_max, s.y[i]);
      y_low = std::min(y_low, s.y[i]);
      if (std::find(xs.begin(), xs.end(), s.x[i]) == xs.end()) xs.push_back(s.x[i]);
    }
  }
  std::sort(xs.begin(), xs.end());
  if (x_min > x_max) x_min = 0, x_max = 1;
  if (x_max == x_min) x_min -= 0.5, x_max += 0.5;
  // The y range: [0, y_top or a nice top], or [a nice bottom, a nice top] around the data.
  double y_bottom = 0.0, y_step, y_top;
  if (plot.y_from_zero || !(y_low < 1e300)) {
    y_step = nice_step(plot.y_top > 0 ? plot.y_top : (y_max > 0 ? y_max : 1.0), 5);
    y_top = plot.y_top > 0 ? plot.y_top : y_max > 0 ? std::ceil(y_max / y_step - 1e-9) * y_step : 1.0;
  } else {
    if (y_max == y_low) y_low -= 0.5, y_max += 0.5;
    y_step = nice_step(y_max - y_low, 5);
    y_bottom = std::floor(y_low / y_step + 1e-9) * y_step;
    y_top = std::ceil(y_max / y_step - 1e-9) * y_step;
  }
  const double pw = kPlotWidth, ph = kPlotHeight;
  // The canvas: the plot, the legend at its right (as wide as its longest line, as tall as its lines: a
  // series drawn for several names lists them one a line, "= name"), the title above; each wide enough for
  // its text.
  double legend_w = 0, legend_h = 0;
  for (const Drawn& d : drawn) {
    for (size_t n = 0; n < d.names.size(); ++n) {
      legend_w = std::max(legend_w, 30 + text_width(d.names[n], 12) + (n ? text_width("= ", 12) : 0));
    }
    legend_h += 16.0 * static_cast<double>(d.names.size()) + 6;
  }
  const double width = std::max({kLeft + pw + kLegendGap + legend_w + 10, text_width(plot.title, 16) + 20,
                                 text_width(plot.note, 11) + 20, kLeft + pw + 20});
  const double height = std::max(kTop + ph + kBottom, kTop + legend_h + 20);
  auto px = [&](double x) { return kLeft + (tx(x) - x_min) / (x_max - x_min) * pw; };
  auto py = [&](double y) { return kTop + ph - (y - y_bottom) / (y_top - y_bottom) * ph; };

  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" << num(width) << "\" height=\""
    << num(height) << "\" viewBox=\"0 0 " << num(width) << " " << num(height)
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<title>" << xml_escape(plot.title) << "</title>\n"
    << "<desc>" << xml_escape(plot.description) << "</desc>\n"
    << "<rect x=\"0\" y=\"0\" width=\"" << num(width) << "\" height=\"" << num(height)
    << "\" fill=\"white\"/>\n"
    << "<text x=\"" << num(width / 2) << "\" y=\"26\" text-anchor=\"middle\" font-size=\"16\">"
    << xml_escape(plot.title) << "</text>\n";
  if (!plot.note.empty()) {
    o << "<text x=\"" << num(width / 2)
      << "\" y=\"44\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555\">" << xml_escape(plot.note)
      << "</text>\n";
  }
  // Grid and ticks: y at nice steps, x at the data's values (or nice steps when there are many).
  o << "<g class=\"y-ticks\" stroke=\"#dddddd\">\n";
  for (double y = y_bottom; y <= y_top + y_step * 1e-6; y += y_step) {
    o << "<line x1=\"" << num(kLeft) << "\" y1=\"" << num(py(y)) << "\" x2=\"" << num(kLeft + pw)
      << "\" y2=\"" << num(py(y)) << "\"/>\n";
    o << "<text x=\"" << num(kLeft - 8) << "\" y=\"" << num(py(y) + 4)
      << "\" text-anchor=\"end\" stroke=\"none\">" << tick_label(y, y_step) << "</text>\n";
  }
  o << "</g>\n<g class=\"x-ticks\" stroke=\"#dddddd\">\n";
  std::vector<std::pair<double, std::string>> x_ticks;
  if (!xs.empty() && xs.size() <= 12) {
    for (double x : xs) x_ticks.emplace_back(x, format_double(x));
  } else if (!plot.log2_x) {
    const double x_step = nice_step(x_max - x_min, 8);
    for (double x = std::ceil(x_min / x_step - 1e-9) * x_step; x <= x_max + x_step * 1e-6; x += x_step)
      x_ticks.emplace_back(x, tick_label(x, x_step));
  } else {
    for (double e = std::ceil(x_min); e <= x_max + 1e-9; e += 1)
      x_ticks.emplace_back(std::exp2(e), format_double(std::exp2(e)));
  }
  for (const auto& [x, label] : x_ticks) {
    o << "<line x1=\"" << num(px(x)) << "\" y1=\"" << num(kTop) << "\" x2=\"" << num(px(x)) << "\" y2=\""
      << num(kTop + ph) << "\"/>\n";
    o << "<text x=\"" << num(px(x)) << "\" y=\"" << num(kTop + ph + 18)
      << "\" text-anchor=\"middle\" stroke=\"none\">" << xml_escape(label) << "</text>\n";
  }
  o << "</g>\n";
  // Axes and labels.
  o << "<g class=\"axes\" stroke=\"black\">\n"
    << "<line x1=\"" << num(kLeft) << "\" y1=\"" << num(kTop + ph) << "\" x2=\"" << num(kLeft + pw)
    << "\" y2=\"" << num(kTop + ph) << "\"/>\n"
    << "<line x1=\"" << num(kLeft) << "\" y1=\"" << num(kTop) << "\" x2=\"" << num(kLeft) << "\" y2=\""
    << num(kTop + ph) << "\"/>\n</g>\n"
    << "<text x=\"" << num(kLeft + pw / 2) << "\" y=\"" << num(height - 18) << "\" text-anchor=\"middle\">"
    << xml_escape(plot.x_label) << "</text>\n"
    << "<text x=\"20\" y=\"" << num(kTop + ph / 2) << "\" text-anchor=\"middle\" transform=\"rotate(-90 20 "
    << num(kTop + ph / 2) << ")\">" << xml_escape(plot.y_label) << "</text>\n";
  // Series: each its colour, dash and marker; later markers smaller, so that coinciding points show all.
  // Nested markers: circles 1.5 larger for every later series with markers; else a shape per series, 0.5
  // smaller for every earlier one.
  auto radius = [&](size_t i) {
    if (!plot.nested_markers) return std::max(2.5, 5.0 - 0.5 * static_cast<double>(i));
    double r = 3.0;
    for (size_t later = i + 1; later < drawn.size(); ++later) {
      if (!drawn[later].points.reference) r += 1.5;
    }
    return r;
  };
  auto shape = [&](size_t i) { return plot.nested_markers ? 0 : static_cast<int>(i % kMarkers); };
  auto color_of = [&](size_t i) {
    return drawn[i].points.reference ? "#888888" : kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
  };
  auto width_of = [&](size_t i) { return drawn[i].points.reference ? "1" : "2"; };
  for (size_t i = 0; i < drawn.size(); ++i) {
    const PlotSeries& s = drawn[i].points;
    const std::string name = drawn[i].joined();
    const char* color = color_of(i);
    o << "<g class=\"series-group\">\n<polyline class=\"series\" data-series=\"" << xml_escape(name)
      << "\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"" << width_of(i)
      << "\" stroke-dasharray=\"" << kDashes[i % 4] << "\" points=\"";
    for (size_t p = 0; p < s.x.size() && p < s.y.size(); ++p) {
      o << (p ? " " : "") << num(px(s.x[p])) << "," << num(py(s.y[p]));
    }
    o << "\"/>\n";
    for (size_t p = 0; p < s.x.size() && p < s.y.size() && !s.reference; ++p) {
      o << marker(shape(i), px(s.x[p]), py(s.y[p]), radius(i), color,
                  xml_escape(name) + ": " + format_double(s.x[p]) + ", " + format_double(s.y[p]));
    }
    o << "</g>\n";
  }
  // Legend.
  o << "<g class=\"legend\">\n";
  double y = kTop + 10;
  for (size_t i = 0; i < drawn.size(); ++i) {
    const double x = kLeft + pw + kLegendGap;
    const char* color = color_of(i);
    o << "<line x1=\"" << num(x) << "\" y1=\"" << num(y) << "\" x2=\"" << num(x + 24) << "\" y2=\"" << num(y)
      << "\" stroke=\"" << color << "\" stroke-width=\"" << width_of(i) << "\" stroke-dasharray=\""
      << kDashes[i % 4] << "\"/>\n";
    if (!drawn[i].points.reference && !plot.nested_markers) {
      o << marker(shape(i), x + 12, y, radius(i), color, xml_escape(drawn[i].joined()));
    }
    for (size_t n = 0; n < drawn[i].names.size(); ++n, y += 16) {
      o << "<text x=\"" << num(x + 30) << "\" y=\"" << num(y + 4) << "\">" << (n ? "= " : "")
        << xml_escape(drawn[i].names[n]) << "</text>\n";
    }
    y += 6;
  }
  o << "</g>\n</svg>\n";
  return o.str();
}

}  // namespace moe::sim
