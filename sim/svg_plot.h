// A hand-written SVG line plot: axes, ticks, labels, a legend and one polyline per series.
#pragma once

#include <string>
#include <vector>

namespace moe::sim {

struct PlotSeries {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;  // same length as x
};

struct LinePlot {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::string description;  // goes into <desc> (the program version and config)
  std::vector<PlotSeries> series;
};

// Renders a standalone SVG 1.1 document (800x500). Text is XML-escaped. The x range spans the data; the y
// range starts at 0 and ends at a "nice" value >= the largest y (1 if all are 0). Each series is one
// <polyline class="series"> plus a marker per point, in a fixed palette; the legend lists series in order.
std::string render_svg(const LinePlot& plot);

// Escapes &, <, >, " and ' for XML text and attributes.
std::string xml_escape(const std::string& s);

}  // namespace moe::sim
