// The SVG writer: well-formed XML, one polyline per series, escaped text and the provenance in <desc>.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/svg_plot.h"

namespace moe::sim {
namespace {

// A small well-formedness check: the prolog, balanced and properly nested tags, quoted attributes, and only
// the five predefined entities. Returns "" when well-formed, else what is wrong.
std::string check_xml(const std::string& s) {
  size_t i = 0;
  if (s.rfind("<?xml", 0) == 0) i = s.find("?>") + 2;
  std::vector<std::string> stack;
  bool root_seen = false;
  while (i < s.size()) {
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      if (semi == std::string::npos) return "bare &";
      const std::string ent = s.substr(i, semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;") {
        return "unknown entity " + ent;
      }
      i = semi + 1;
      continue;
    }
    if (s[i] != '<') {
      if (s[i] == '>') return "stray >";
      if (stack.empty() && s[i] != '\n' && s[i] != ' ') return "text outside the root";
      ++i;
      continue;
    }
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return "unterminated tag";
    std::string tag = s.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) return "mismatched </" + tag.substr(1) + ">";
      stack.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    if (self_closing) tag.pop_back();
    const std::string name = tag.substr(0, tag.find_first_of(" \n"));
    // Attributes: name="value" pairs, values without '<'.
    size_t q = 0;
    int quotes = 0;
    while ((q = tag.find('"', q)) != std::string::npos) ++quotes, ++q;
    if (quotes % 2) return "unbalanced quotes in <" + name + ">";
    if (tag.find('<') != std::string::npos) return "< inside a tag";
    if (stack.empty()) {
      if (root_seen) return "two roots";
      root_seen = true;
    }
    if (!self_closing) stack.push_back(name);
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  return root_seen ? "" : "no root";
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(SimSvg, WellFormedWithOnePolylinePerSeries) {
  LinePlot plot;
  plot.title = "drop <rate> & \"cf\"";
  plot.x_label = "capacity factor";
  plot.y_label = "drop rate";
  plot.description = "moe-sim 0.1.0 sweep experts=8 axis=top-k=1,2;scope=batch";
  double shift = 0;
  for (const char* mode : {"greedy", "stable", "rank-only"}) {
    plot.series.push_back({mode, {0.5, 1.0, 1.25, 2.0}, {0.4 + shift, 0.2, 0.1, 0.0}});
    shift += 0.05;
  }
  const std::string svg = render_svg(plot);
  EXPECT_EQ(check_xml(svg), "") << svg;
  EXPECT_EQ(count(svg, "<polyline "), 3u);
  EXPECT_NE(svg.find("<desc>moe-sim 0.1.0 sweep experts=8"), std::string::npos);
  EXPECT_NE(svg.find("drop &lt;rate&gt; &amp; &quot;cf&quot;"), std::string::npos);
  for (const char* mode : {"greedy", "stable", "rank-only"}) {
    EXPECT_NE(svg.find(std::string("data-series=\"") + mode + "\""), std::string::npos);
    EXPECT_NE(svg.find(std::string(">") + mode + "</text>"), std::string::npos) << "legend entry " << mode;
  }
}

// What a reader needs: series with the same points drawn once and named together (none hidden under
// another), a tick at each x value of the data (1.25, not a rounded 1.2), the y axis ending where asked (the
// number of trials, not the next "nice" value), a note under the title, and a canvas as wide as its longest
// label.
TEST(SimSvg, CoincidingSeriesTicksAtTheDataAndLabelsInside) {
  LinePlot plot;
  plot.title = "distinct completions";
  plot.note = "30 trials";
  plot.y_top = 30;
  const std::vector<double> cf = {0.5, 0.75, 1.0, 1.25, 1.5, 2.0};
  plot.series.push_back({"greedy", cf, {26, 21, 18, 10, 6, 2}});
  plot.series.push_back({"rank-only", cf, {26, 21, 18, 10, 6, 2}});
  plot.series.push_back({"stable", cf, {1, 1, 1, 1, 1, 1}});
  plot.series.push_back(
      {"a configuration with a rather long name that needs room/invariant/varied", cf, {1, 1, 1, 1, 1, 1}});
  const std::string svg = render_svg(plot);
  EXPECT_EQ(check_xml(svg), "") << svg;
  EXPECT_EQ(count(svg, "<polyline "), 2u);
  EXPECT_NE(svg.find("data-series=\"greedy = rank-only\""), std::string::npos);
  EXPECT_NE(svg.find(">= rank-only</text>"), std::string::npos) << "the legend names both";
  for (const char* tick : {">0.5<", ">0.75<", ">1<", ">1.25<", ">1.5<", ">2<"}) {
    EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  }
  EXPECT_NE(svg.find(">30</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">40</text>"), std::string::npos);
  EXPECT_NE(svg.find(">30 trials</text>"), std::string::npos);
  // The canvas holds the longest legend line (72 characters at 12 px: about 540 px right of the plot).
  const size_t w = svg.find("width=\"");
  EXPECT_GT(std::stod(svg.substr(w + 7)), 80 + 500 + 20 + 30 + 0.62 * 12 * 72);
}

TEST(SimSvg, DegenerateDataStillRenders) {
  LinePlot plot;
  plot.series.push_back({"flat", {1.0}, {0.0}});
  const std::string svg = render_svg(plot);
  EXPECT_EQ(check_xml(svg), "");
  EXPECT_EQ(count(svg, "<polyline "), 1u);
  EXPECT_EQ(check_xml(render_svg(LinePlot{})), "");
  EXPECT_EQ(check_xml("<a><b></a></b>"), "mismatched </a>");  // the checker itself
}

// Values that differ by little beside their size (perplexities): without y_from_zero the axis spans them,
// reference series are thin grey lines without markers, nested markers shrink with the series' index.
TEST(SimSvg, DataRangeReferencesAndNestedMarkers) {
  LinePlot plot;
  plot.y_from_zero = false;
  plot.nested_markers = true;
  plot.series.push_back({"baseline", {1.0, 2.0}, {29.6, 29.6}, true});
  plot.series.push_back({"a", {1.0, 2.0}, {33.0, 29.7}});
  plot.series.push_back({"b", {1.0, 2.0}, {35.5, 29.7}});
  const std::string svg = render_svg(plot);
  EXPECT_EQ(check_xml(svg), "") << svg;
  EXPECT_EQ(svg.find(">0</text>"), std::string::npos) << "the y axis does not start at 0";
  EXPECT_NE(svg.find(">28</text>"), std::string::npos);  // nice steps of 2 around 29.6 .. 35.5
  EXPECT_NE(svg.find(">36</text>"), std::string::npos);
  EXPECT_NE(svg.find("data-series=\"baseline\" fill=\"none\" stroke=\"#888888\" stroke-width=\"1\""),
            std::string::npos);
  EXPECT_EQ(count(svg, "<circle "), 4u);   // none on the reference line
  EXPECT_EQ(count(svg, "r=\"4.5\""), 2u);  // series a: one later series with markers
  EXPECT_EQ(count(svg, "r=\"3\""), 2u);    // series b, the last
  // The default keeps the axis from 0.
  plot.y_from_zero = true;
  EXPECT_NE(render_svg(plot).find(">0</text>"), std::string::npos);
}

}  // namespace
}  // namespace moe::sim
