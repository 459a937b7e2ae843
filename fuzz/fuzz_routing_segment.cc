// A prefix cache's routing segment bytes (router/routing_state.h, RoutingSegment::parse; "MOERSEG1" and
// "MOERSEG2", docs/routing.md "The segment bytes"): a segment whose sizes agree with its header and whose
// turn ends are valid, which serializes back to the same bytes; or std::invalid_argument naming the field.
#include <algorithm>
#include <span>
#include <stdexcept>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "router/routing_state.h"
#include "router/rules/turn_rules.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const moe::RoutingSegment s = moe::RoutingSegment::parse(std::span<const uint8_t>(data, size));
    const size_t entries = static_cast<size_t>(s.end - s.begin) * static_cast<size_t>(s.top_k);
    MOE_FUZZ_CHECK(s.choices.size() == entries && s.placed.size() == entries);
    MOE_FUZZ_CHECK(s.top_k >= 1 && s.top_k <= s.num_experts);
    if (!s.turn_ends.empty()) {
      MOE_FUZZ_CHECK(moe::rules::turn_ends_error(s.turn_ends.data(),
                                                 static_cast<int64_t>(s.turn_ends.size())) == nullptr);
      MOE_FUZZ_CHECK(s.turn_ends.back() == s.prompt_length);
    }
    const std::vector<uint8_t> again = s.serialize();
    MOE_FUZZ_CHECK(again.size() == size && std::equal(again.begin(), again.end(), data));
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
