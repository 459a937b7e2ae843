// Why a batch cannot be planned: the one error vocabulary of the CPU and GPU planners. The GPU detects errors
// on the device and writes a PlanError; the CPU builds the same struct; both throw through
// throw_if_plan_error (router/plan_checks.h), so the two backends report a bad batch in the same words.
#pragma once

#include <cstdint>

namespace moe {

enum PlanErrorCode : int32_t {
  kPlanOk = 0,
  kPlanDuplicateToken = 1,  // two rows with the same (request_id, position) where the policy ranks by it
  kPlanNonContiguousPosition = 2,  // causal: positions not contiguous from the request's next position
  kPlanStateRowMismatch = 3,       // causal (GPU table): tokens of one request name different state rows
  kPlanNotAdmitted = 4,            // sequence: a request the routing state has not admitted
  kPlanRuleMismatch = 5,           // a request whose state was planned (or restored) under another rule
};

// Trivially copyable: it crosses the host/device boundary as bytes.
struct PlanError {
  int32_t code = kPlanOk;
  int32_t row_a = -1;     // duplicate: the earlier row in claiming order; otherwise the request's first row
  int32_t row_b = -1;     // duplicate: the later row; otherwise the offending row
  uint32_t position = 0;  // the offending row's position
  uint32_t expected = 0;  // causal: the position that was expected
  uint64_t request_id = 0;
};

}  // namespace moe
