// A minimal hand-written SVG line chart for the divergence lab's plots.
#pragma once

#include <string>
#include <vector>

namespace moe::sim::diverge {

struct Series {
  std::string name;
  std::vector<double> x, y;  // same length
};

struct Chart {
  std::string title, x_label, y_label, note;  // note: a line of small text under the title
  std::vector<Series> series;
  bool log2_x = false;  // x axis in log2 scale (x must be > 0)
};

// A standalone SVG 1.1 document (760 x 460): axes with ticks, one polyline with markers per series, a legend.
// The y axis starts at 0. Text is XML-escaped.
std::string render_chart(const Chart& chart);

}  // namespace moe::sim::diverge
