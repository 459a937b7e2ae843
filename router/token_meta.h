// Identity of one token row of a batch.
#pragma once

#include <cstdint>

namespace moe {

// A token row's owner and place. The row's index in the batch is its *arrival* index; request_id and
// position are what order-stable dispatch ranks by. Within one batch, (request_id, position) pairs
// are expected to be distinct; the planner checks this wherever it depends on it (request priority,
// request and causal scopes).
struct TokenMeta {
  uint64_t request_id = 0;
  uint32_t position = 0;  // index of the token in its request (0 = first prompt token)

  friend bool operator==(const TokenMeta&, const TokenMeta&) = default;
};

}  // namespace moe
