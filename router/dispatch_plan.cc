#include "router/dispatch_plan.h"

namespace moe {

std::string_view to_string(PairStatus s) {
  switch (s) {
    case PairStatus::kKept:
      return "kept";
    case PairStatus::kRerouted:
      return "rerouted";
    case PairStatus::kDropped:
      return "dropped";
  }
  return "?";
}

void DispatchPlan::reserve(int max_tokens, int k, int experts) {
  const size_t pairs = static_cast<size_t>(max_tokens) * k;
  pair_expert.reserve(pairs);
  pair_slot.reserve(pairs);
  pair_weight.reserve(pairs);
  pair_status.reserve(pairs);
  slot_pairs.reserve(pairs);
  expert_load.reserve(experts);
  expert_capacity.reserve(experts);
  expert_offsets.reserve(experts + 1);
}

}  // namespace moe
