#include "router/causal_state.h"

#include <stdexcept>
#include <string>

namespace moe {

CausalRoutingState::CausalRoutingState(int num_experts) : num_experts_(num_experts) {
  if (num_experts < 1) {
    throw std::invalid_argument("causal routing state: num_experts must be >= 1 (got " +
                                std::to_string(num_experts) + ")");
  }
}

const CausalRoutingState::Request* CausalRoutingState::find(uint64_t request_id) const {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : &it->second;
}

CausalRoutingState::Request& CausalRoutingState::get_or_create(uint64_t request_id) {
  auto [it, inserted] = requests_.try_emplace(request_id);
  if (inserted) it->second.slots_held.assign(num_experts_, 0);
  return it->second;
}

void CausalRoutingState::release(uint64_t request_id) {
  requests_.erase(request_id);
}

}  // namespace moe
