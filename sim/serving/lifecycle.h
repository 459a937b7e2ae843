// The request lifecycle of a serving step, in one place: the order in which the engine's events (sim/serving/
// engine.h) reach whatever holds the requests' state - the divergence lab's decoder (KV caches and routing
// states, sim/diverge/serving.h), the simulator's routing state per policy (sim/experiment.h), a test's
// backend under replay (tests/support/serving_trial.h). Each supplies only what differs: a StepHandler.
//
// A step, in the order that applies (a different order is a different engine):
//   1. release the preempted requests (their KV and routing state are gone; they will be re-prefilled)
//   2. admit the admitted ones: a new request with its prompt length, or one whose positions [0, cached)
//      come from the prefix cache - restore them from the payloads kept for its blocks (KV, routing
//      segments); a resumed (preempted) request is admitted again with its original prompt length
//   3. the forward pass over the step's rows (chunks of prompts, decode rows, draft rows)
//   4. the verdict: how many rows of each span are accepted (every row of a prompt chunk; 1 + the accepted
//      drafts of a speculative span) - live steps only; a replayed step carries it
//   5. roll back the rejected draft positions
//   6. keep the payload of the blocks the cache registered (computed positions now shared)
//   7. release the finished requests
// run_step() asks the engine for the step and completes it between 4 and 5; replay_step() applies a step
// that run_step() produced to another handler (the simulator plans every policy over one engine pass).
#pragma once

#include <cstdint>
#include <vector>

#include "sim/serving/engine.h"

namespace moe::sim::serving {

// What differs between the drivers of the lifecycle. Every hook but accept() does nothing by default (a
// handler that only schedules, or one whose model keeps no per-request state).
class StepHandler {
 public:
  virtual ~StepHandler() = default;
  // 1 and 7: the request's state is dropped (preempted before the pass, finished after it).
  virtual void release(uint64_t /*id*/) {}
  // 2: the request (re)enters; admission.cached > 0: restore [0, cached) from admission.blocks' payloads.
  virtual void admit(const Admission& /*admission*/) {}
  // 3: the forward pass over step.rows (step.accepted is empty when live, the recorded verdict in a replay).
  virtual void forward(const Step& /*step*/) {}
  // 4 (live steps): one count per span into `accepted`, empty on entry. The default accepts every row, which
  // the engine refuses for a span with drafts: a handler that lets the engine speculate decides them.
  virtual void accept(const Step& step, std::vector<uint32_t>& accepted);
  // 5: forget the request's positions >= position.
  virtual void rollback(uint64_t /*id*/, uint32_t /*position*/) {}
  // 6: the cache holds block.block now: keep the payload of positions [begin, end) of request block.id.
  virtual void keep(const Registered& /*block*/) {}
};

// Runs the engine's next step through `handler` (1-7 above) into `step` (its vectors reused); false, with
// nothing run, when every request has finished. Engine errors propagate (std::invalid_argument for a bad
// verdict, with the step still pending).
bool run_step(Engine& engine, Step& step, StepHandler& handler);

// Applies a step that run_step() produced (or one built by hand in the same form, such as a static batch)
// to another handler: the same events in the same order, with the step's recorded verdict.
void replay_step(const Step& step, StepHandler& handler);

}  // namespace moe::sim::serving
