// Per-request routing state carried across forward passes for causal capacity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace moe {

// For every live request: the next position it expects and the slots its earlier tokens hold at each
// expert. The planner reads and advances it under CapacityScope::kCausal, so a token's decision depends only
// on its own request's prefix, however the prompt is chunked into forward passes.
// Not thread-safe; one state per sequence of planning calls. Adding a request allocates (once per request).
class CausalRoutingState {
 public:
  struct Request {
    uint32_t next_position = 0;
    std::vector<int32_t> slots_held;  // [num_experts]
  };

  explicit CausalRoutingState(int num_experts);

  int num_experts() const { return num_experts_; }
  // nullptr when the request has not been seen (or was released).
  const Request* find(uint64_t request_id) const;
  // The request's state, created at position 0 when new.
  Request& get_or_create(uint64_t request_id);
  // Forgets a finished request. Unknown ids are ignored.
  void release(uint64_t request_id);
  void clear() { requests_.clear(); }
  size_t num_requests() const { return requests_.size(); }

 private:
  int num_experts_;
  std::unordered_map<uint64_t, Request> requests_;
};

}  // namespace moe
