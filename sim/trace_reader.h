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
// Every number must be at most 2^30 (arrival_time below 2^30 + 1). Blank lines and CSV lines starting with
// '#' are skipped. Throws DataError naming the file and line (a missing path or a directory is named as
// such).
std::vector<RequestSpec> read_trace(const std::string& path);

// Parses the text of a trace (for tests and the fuzzer): JSONL if `jsonl`, else CSV; `name` appears in
// messages as the path would.
std::vector<RequestSpec> parse_trace(const std::string& text, const std::string& name, bool jsonl);

}  // namespace moe::sim
