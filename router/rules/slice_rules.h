// Batch scope with arrival priority, planned in slices: a batch whose rows are the slices' rows concatenated
// in slice order (expert parallelism: slice h = rank h's rows, planned by rank h alone;
// docs/expert-parallel.md), with the plan that one planner would make of the whole batch. One definition for
// every planner that plans a slice (router/dispatch_planner.cc's plan_slice, the expert-parallel layer's
// exchange of claim counts).
//
// Claiming under batch scope is choice-major in arrival order (docs/routing.md): at expert e, first the
// rank-0 pairs of every row in row order, then the rank-1 pairs, ... A pair's claim index at e is the number
// of pairs that claimed e before it; it is kept iff its claim index is below the capacity C (the pool's count
// only grows, and every claim below C was kept), and then its slot in the whole batch is its claim index.
// Pair (t, j) of slice h at e has claim index
//   claims_before(h, j, e) + (the pairs of slice h at rank j and expert e in rows before t)
//   claims_before(h, j, e) = sum over j' < j of all slices' rank-j' claims at e
//                          + sum over slices h' < h of their rank-j claims at e
// so a slice's planner needs, besides its own rows, the k * E numbers claims_before(h, ., .): an exclusive
// scan of the slices' per-(j, e) claim counts, not the other slices' routes. Unavailable ranks (expert -1)
// claim nothing. Rerouting and other priorities need the whole batch (not sliceable).
#pragma once

#include <cstdint>

#include "base/host_device.h"
#include "router/dispatch_policy.h"
#include "router/rules/plan_rules.h"

namespace moe::rules {

// Whether a policy's plan can be made slice by slice from claim counts: batch scope, arrival priority, drop.
MOE_HD inline bool plans_in_slices(const DispatchPolicy& p) {
  return p.scope == CapacityScope::kBatch && p.priority == Priority::kArrival &&
         p.overflow == Overflow::kDrop;
}

// claims[j * num_experts + e] += the rank-j pairs at e of rows [0, num_tokens) of `routes`.
MOE_HD inline void count_slice_claims(const RouteArrays& routes, int64_t num_tokens, int num_experts,
                                      int64_t* claims) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int j = 0; j < routes.top_k; ++j) {
      const int32_t e = routes.expert(t, j);
      if (e >= 0) ++claims[int64_t{j} * num_experts + e];
    }
  }
}

// For one expert: claims[h * top_k + j] = slice h's rank-j claims at it (h < num_slices) ->
// before[h * top_k + j] = claims_before(h, j) above.
MOE_HD inline void slice_claims_before(const int64_t* claims, int num_slices, int top_k, int64_t* before) {
  int64_t earlier_ranks = 0;  // every slice's claims at ranks < j
  for (int j = 0; j < top_k; ++j) {
    int64_t running = earlier_ranks;
    for (int h = 0; h < num_slices; ++h) {
      before[int64_t{h} * top_k + j] = running;
      running += claims[int64_t{h} * top_k + j];
    }
    earlier_ranks = running;
  }
}

// Decides the pairs of one slice (rows [0, num_tokens)) in claiming order: pair (t, j) at e is kept iff
// claims_before[j * E + e] + seen[j * E + e] < capacity, seen counting the slice's earlier claims (zeroed by
// the caller, [top_k * E], advanced here). place(pair, expert, weight, status, held_before) as the other
// rules; held_before is the pair's claim index in the whole batch (its slot there).
template <class Place>
MOE_HD inline void decide_slice(const RouteArrays& routes, int64_t num_tokens, int num_experts,
                                const int64_t* claims_before, int64_t capacity, int64_t* seen,
                                Place&& place) {
  for (int j = 0; j < routes.top_k; ++j) {
    for (int64_t t = 0; t < num_tokens; ++t) {
      const int32_t e = routes.expert(t, j);
      if (e < 0) continue;
      const int64_t at = int64_t{j} * num_experts + e;
      const int64_t claim = claims_before[at] + seen[at]++;
      if (claim < capacity) {
        place(t * routes.top_k + j, e, routes.weight(t, j), PairStatus::kKept, static_cast<int32_t>(claim));
      }
    }
  }
}

}  // namespace moe::rules
