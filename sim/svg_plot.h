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
  std::string note;  // a line of small text under the title (may be empty)
  std::string x_label;
  std::string y_label;
  std::string description;  // goes into <desc> (the program version and config)
  std::vector<PlotSeries> series;
  double y_top = 0;     // the y axis's end (0: a "nice" value >= the largest y), e.g. the number of trials
  bool log2_x = false;  // x on a log2 scale (every x > 0)
  // false: the y range spans the data (nice steps below the smallest y and above the largest), for values
  // that differ by little beside their size (perplexities).
  bool y_from_zero = true;
  // Every series' markers are circles that shrink with the series' index (earlier series' larger, drawn
  // underneath), so points where several series coincide show as concentric rings of every colour; the
  // legend shows the lines alone. Off: each series its own marker shape (below).
  bool nested_markers = false;
};

// Renders a standalone SVG 1.1 document. Text is XML-escaped, and every label lies inside the canvas: the
// canvas widens for a long title or legend entry. The x range spans the data, with a tick at each x value of
// the data when there are at most 12 of them (else at "nice" steps); the y range starts at 0 and ends at
// y_top, or a "nice" value >= the largest y (1 if all are 0), ticks at nice steps. Series with the same
// points are drawn once, their legend entry naming them all ("greedy = rank-only"); each drawn series is one
// <polyline class="series"> with its own colour, dash pattern and marker shape (markers of later series
// smaller, so points that coincide show every series); the legend lists them in order.
std::string render_svg(const LinePlot& plot);

// Escapes &, <, >, " and ' for XML text and attributes.
std::string xml_escape(const std::string& s);

}  // namespace moe::sim
