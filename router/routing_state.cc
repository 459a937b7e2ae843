#include "router/routing_state.h"

#include <stdexcept>
#include <string>

namespace moe {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument("routing state: " + msg);
}

}  // namespace

RoutingState::RoutingState(int num_experts, int top_k) : num_experts_(num_experts), top_k_(top_k) {
  if (num_experts < 1) fail("num_experts must be >= 1 (got " + std::to_string(num_experts) + ")");
  if (top_k < 0 || top_k > num_experts) {
    fail("top_k (" + std::to_string(top_k) + ") must be in [0, num_experts=" + std::to_string(num_experts) +
         "] (0: not checked)");
  }
}

void RoutingState::admit(uint64_t request_id, uint32_t prompt_length) {
  if (prompt_length == 0) fail("request " + std::to_string(request_id) + ": prompt_length must be >= 1");
  if (requests_.count(request_id) != 0) {
    fail("request " + std::to_string(request_id) +
         " is already admitted (release it before admitting it again)");
  }
  Request& r = requests_[request_id];
  r.prompt_length = prompt_length;
  r.slots_held.assign(num_experts_, 0);
  if (top_k_ > 0) r.higher_choices.assign(static_cast<size_t>(top_k_) * num_experts_, 0);
}

void RoutingState::release(uint64_t request_id) {
  if (requests_.erase(request_id) == 0) {
    fail("request " + std::to_string(request_id) + " cannot be released: the state does not hold it");
  }
}

bool RoutingState::release_if_held(uint64_t request_id) {
  return requests_.erase(request_id) != 0;
}

const RoutingState::Request* RoutingState::find(uint64_t request_id) const {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : &it->second;
}

int RoutingState::counts_top_k() const {
  if (top_k_ > 0) return top_k_;
  for (const auto& [id, r] : requests_) {
    if (!r.higher_choices.empty()) return static_cast<int>(r.higher_choices.size() / num_experts_);
  }
  return 0;
}

RoutingState::Request& RoutingState::get_or_create(uint64_t request_id) {
  auto [it, inserted] = requests_.try_emplace(request_id);
  if (inserted) {
    it->second.slots_held.assign(num_experts_, 0);
  }
  return it->second;
}

}  // namespace moe
