// Request traces: arrivals and lengths recorded from a real service, or written by hand.
#pragma once

#include <string>
#include <vector>

#include "sim/request_spec.h"

namespace moe::sim {

// Reads a trace. Files ending in .jsonl or .json hold one JSON object per line; anything else is CSV with a
// header line. Fields (any order; others are ignored):
//   arrival_step (integer >= 0)  or  arrival_time (number >= 0, in steps; the request arrives at
//   floor(arrival_time)); prompt_len (>= 1); decode_len (>= 0); optional request_id (default: the row
//   index, 0-based), distinct.
// Blank lines and CSV lines starting with '#' are skipped. Throws DataError naming the file and line.
std::vector<RequestSpec> read_trace(const std::string& path);

}  // namespace moe::sim
