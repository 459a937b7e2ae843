// Replaying real router logits through a dispatch policy.
#pragma once

#include <string>

#include "sim/experiment.h"
#include "sim/sim_config.h"

namespace moe::sim {

struct ReplayResult {
  SimConfig config;  // with router.num_experts taken from the file when --experts was not given
  RunStats stats;
  int64_t num_requests = 0;
};

// Reads config.replay.logits_path (float32 [T, E] .npy; float64 and float16 files are converted, with a note
// on stderr saying so) and the optional meta CSV (without one: one request, id 0, positions 0..T-1), routes
// and plans the T tokens as one batch, and writes config.replay.out_path: a provenance comment line, the
// header `token,j,expert,slot,weight,status`, then one row per pair in (token, j) order (expert and slot -1
// when dropped; weight printed with 9 significant digits, which reads back as the same float). Throws
// UsageError when --experts was given and differs from E (or the router config is invalid for E), DataError
// for bad files and for logits or metadata the router or planner rejects (e.g. "router: token row 3 has no
// finite logit").
ReplayResult run_replay(const SimConfig& config);

}  // namespace moe::sim
