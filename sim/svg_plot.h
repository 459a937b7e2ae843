// A hand-written SVG line plot: axes, ticks, labels, a legend and one polyline per series.
#pragma once

#include <string>
#include <vector>

namespace moe::sim {

struct PlotSeries {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;  // same length as x
  // A reference level (a baseline, a threshold): a thin grey line without markers, in the legend alike.
  bool reference = false;
};

struct LinePlot {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::string description;  // goes into <desc> (the program version and config)
  std::vector<PlotSeries> series;
  // false: the y range spans the data (nice steps below the smallest y and above the largest), for values
  // that differ by little beside their size (perplexities).
  bool y_from_zero = true;
  // Markers shrink with the series' index (earlier series' markers are larger and drawn underneath), so
  // points where several series coincide show as concentric rings of every colour.
  bool nested_markers = false;
};

// Renders a standalone SVG 1.1 document (800x500). Text is XML-escaped. The x range spans the data; the y
// range starts at 0 (or, without y_from_zero, at a "nice" value <= the smallest y) and ends at a "nice" value
// >= the largest y (1 if all are 0). Each series is one
// <polyline class="series"> plus a marker per point, in a fixed palette; the legend lists series in order.
std::string render_svg(const LinePlot& plot);

// Escapes &, <, >, " and ' for XML text and attributes.
std::string xml_escape(const std::string& s);

}  // namespace moe::sim
