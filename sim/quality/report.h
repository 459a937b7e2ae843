// The reports of a quality run: the table (with the equal-quality comparison), JSON, CSV and an SVG plot of
// perplexity against capacity factor. Every number comes from the report: the same report, the same bytes.
#pragma once

#include <string>

#include "sim/quality/quality.h"

namespace moe::sim::quality {

// The heading lines (model, text, serving), the table of every point (dropless first) and the
// equal-quality table.
std::string format_table(const QualityReport& report);
// One JSON object: the text and serving settings, "points" (dropless first) and "equal_quality".
std::string to_json(const QualityReport& report);
// A header and one row per point (dropless first).
std::string to_csv(const QualityReport& report);
// Perplexity against capacity factor, one line per mode and overflow (the grid's factors and the refinement's
// midpoints), with dropless and dropless + tolerance as horizontal lines; the y axis spans the data (not 0).
std::string to_svg(const QualityReport& report);

}  // namespace moe::sim::quality
