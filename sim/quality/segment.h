// One segment of a quality run: a few scored windows of the text served among stranger traffic by the serving
// engine (sim/serving/engine.h), as the divergence lab serves its probe: continuous batching, chunked prefill
// under a token budget, the model's dispatch policy with its real capacity. A scored window is a request
// whose prompt is the window and which generates one token; the logits of every one of its prompt rows are
// its predictions. Strangers are the lab's traffic (sim/diverge/traffic.h): Poisson arrivals, held-out
// prompts, shared system prompts, greedy decoding.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "moe/model/model.h"
#include "sim/diverge/serving.h"
#include "sim/diverge/traffic.h"
#include "sim/quality/scored_text.h"
#include "sim/serving/engine.h"

namespace moe::sim::quality {

// When the scored windows arrive among the strangers: window j of a segment at step first_step + j *
// interval; strangers arrive over [0, first_step + windows * interval).
struct Arrivals {
  int first_step = 16;
  int interval = 8;
};

struct Segment {
  // Ids 1, 2, ... in arrival order (request i has id i + 1); a window after the strangers of its step.
  std::vector<diverge::Request> requests;
  std::vector<int32_t> window_of;  // per request: its window's index in `windows`, -1 for a stranger
  std::vector<Window> windows;
  std::vector<int64_t> first_token;  // per window: the segment index of its first prediction
  int64_t num_tokens = 0;            // predictions in the segment (the windows' lengths)
};

// The segment of `windows` of `stream`: the windows arrive as `arrivals` says, among the strangers
// make_traffic draws from `strangers` (its seed stream `seed`; its probe is not used). traffic.arrival_rate 0
// and traffic.fixed_interval 0: no strangers. Throws std::invalid_argument for an empty window list.
Segment make_segment(std::span<const int32_t> stream, std::span<const Window> windows,
                     const Arrivals& arrivals, const diverge::TrafficConfig& traffic,
                     const diverge::PromptSource& strangers, uint64_t seed);

// What one serving run of a segment computed, summed over its steps (and, for pairs and slots, over the MoE
// layers): every row of the batch, and the scored rows ("text") alone.
struct ServeCounts {
  int64_t steps = 0;
  int64_t rows = 0, text_rows = 0;
  // kept: on one of the token's top-k experts; rerouted: on a later-ranked one (overflow reroute).
  int64_t pairs = 0, kept = 0, rerouted = 0, dropped = 0;
  int64_t text_pairs = 0, text_dropped = 0;
  int64_t slots = 0;        // slots the policy offered: the plans' expert_capacity summed over experts
  int64_t peak = 0;         // experts x the busiest expert's load: what one buffer size for all would need
  int64_t step_layers = 0;  // steps x MoE layers (the denominators of the per-step means)
  void add(const ServeCounts& o);
};

// Receives the logits of prediction `token` (a segment index) of a scored row, in row order.
using RowSink = std::function<void(int64_t token, const float* logits)>;

// Serves `segment` on `model` (which must hold no request; its options give the kernels and the dispatch
// policy) with `engine` (no prefix cache, no speculation: the same steps for every policy) until every scored
// window has finished, handing each scored row's logits to `sink`; strangers decode greedily. Releases every
// request afterwards. Throws std::invalid_argument for an engine with a prefix cache or speculation, and
// whatever the engine and the model throw.
ServeCounts serve_segment(model::Model& model, const Segment& segment, const serving::EngineConfig& engine,
                          const RowSink& sink);

}  // namespace moe::sim::quality
