#include "sim/serving/lifecycle.h"

namespace moe::sim::serving {
namespace {

// 1-2: what must hold before the forward pass.
void enter(const Step& step, StepHandler& handler) {
  for (uint64_t id : step.preempted) handler.release(id);
  for (const Admission& a : step.admitted) handler.admit(a);
}

// 5-7: what the verdict leaves behind.
void leave(const Step& step, StepHandler& handler) {
  for (const TokenMeta& r : step.rollbacks) handler.rollback(r.request_id, r.position);
  for (const Registered& b : step.registered) handler.keep(b);
  for (uint64_t id : step.finished) handler.release(id);
}

}  // namespace

void StepHandler::accept(const Step& step, std::vector<uint32_t>& accepted) {
  for (const Span& s : step.spans) accepted.push_back(s.end - s.begin);
}

bool run_step(Engine& engine, Step& step, StepHandler& handler) {
  if (!engine.next(step)) return false;
  enter(step, handler);
  handler.forward(step);
  handler.accept(step, step.accepted);
  engine.complete(step);
  leave(step, handler);
  return true;
}

void replay_step(const Step& step, StepHandler& handler) {
  enter(step, handler);
  handler.forward(step);
  leave(step, handler);
}

}  // namespace moe::sim::serving
