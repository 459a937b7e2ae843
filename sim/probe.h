// The probe experiment: how much one request's routing depends on strangers in its batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "router/dispatch_policy.h"
#include "sim/progress.h"
#include "sim/sim_config.h"

namespace moe::sim {

struct ProbeResult {
  std::string mode;
  DispatchPolicy policy;
  int trials = 0;
  int64_t probe_pairs = 0;         // pairs of the probe per trial (probe_len * top_k)
  int64_t displaced_pairs = 0;     // over all trials: pairs whose (expert, status, weight bits) differ
  double displacement_rate = 0.0;  // displaced_pairs / (trials * probe_pairs)
  int distinct_outcomes = 0;       // distinct probe plans seen over the trials
  int trials_displaced = 0;        // trials in which at least one probe pair differed
  double alone_drop_rate = 0.0;    // the probe's drop rate when routed alone
  double mean_drop_rate = 0.0;     // its mean drop rate over the trials
  double mean_batch_tokens = 0.0;
};

// One probe request (id probe.probe_id, positions 0..probe_len-1) is first planned alone, then co-batched in
// `trials` random batches: trial i draws from stream_key(seed, kTrialTag, i) a stranger count in
// [min_strangers, max_strangers], distinct stranger ids in [0, 2^32) (never the probe's), stranger lengths
// from workload.prompt_len (>= 1), and a random order (Fisher-Yates): of all rows (probe.shuffle "rows"), or
// of whole requests, each keeping its rows together in position order ("requests"). Logits come from the
// score model, so the probe's logits are the same in every trial. Each mode in `modes` (policy: that mode
// with the config's explicit policy settings on top, as build_config does) is planned on the same batches.
// A pair is displaced when its expert, status or weight bits differ from the alone plan; an outcome is the
// probe's whole per-pair (expert, status, weight bits) list, hashed.
std::vector<ProbeResult> run_probe(const SimConfig& config, const std::vector<SimConfig>& per_mode,
                                   Progress* progress = nullptr);

}  // namespace moe::sim
