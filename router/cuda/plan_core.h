// Internal to kernels/cuda: the dispatch planner's algorithm, written once against Thrust and compiled for
// two execution policies: thrust::cuda::par_nosync(arena).on(stream) in plan_dispatch.cu, and
// thrust::omp::par in plan_omp.cc (so that the algorithm is tested on every machine).
//
// It reproduces router/dispatch_planner.cc exactly; the rules both share are router/rules/ (sort keys,
// capacity formulas, rerouting, the position-ordered walk of causal scope, token totals), called here as
// there. How the sequential CPU rules become data-parallel:
//
//  1. Claiming order. The CPU sorts tokens by (major, minor, token). Here: start from the identity and apply
//     stable sorts, least significant key first (position or score key or random key, then request_id),
//     which gives the same order because the identity breaks every remaining tie by token.
//  2. Pools (groups): contiguous runs of the order with one request_id (request/causal scope), else one.
//  3. Kept pairs (pooled scopes). Within a pool the CPU visits pairs choice-major in claiming order and keeps
//     a pair while its expert's count is below the capacity; the count only grows, so a pair is kept iff
//     fewer than `capacity` earlier pairs of its pool wanted the same expert. Sorting the pairs by the claim
//     key [group | expert | j | i] and ranking each inside its (group, expert) run decides every pair at
//     once; the rank is also its slot within the pool.
//  4. Reroute. Inherently sequential (each reroute sees the counts left by the previous one): one thread per
//     pool walks that pool's overflowing pairs in claiming order (compacted by a scan), exactly as the CPU.
//     Batch scope therefore reroutes on one thread.
//  5. Causal and sequence scopes. Decisions depend on the request's own running counts: one thread per
//     request walks its tokens in position order (kept pairs, then that token's reroutes), reading and
//     advancing its row of the routing-state table (sequence: its prompt rows, then its decode rows).
//  6. Slots. Batch/none: the slot within the (only) pool is the slot. Request/causal/sequence: slots count
//     across pools in pool order, so the placed pairs are sorted by [expert | group | slot within group] and
//     each one's rank within its expert's run is its slot; the sorted pairs are slot_pairs.
//  7. Totals and survivor renormalisation per token, in j order with the CPU's float operations.
//
// NOTES: every step is a Thrust call on `exec` (no host synchronisation, no allocation beyond the
// execution policy's allocator), so on CUDA the whole plan can be captured in a graph. Errors are found on
// the device and written to PlanOutputs::error; the routing-state table is only written when there is none.
#pragma once

#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>
#include <thrust/sort.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "router/cuda/plan_bits.h"
#include "router/cuda/plan_types.h"
#include "router/rules/capacity.h"
#include "router/rules/plan_rules.h"
#include "router/rules/sort_keys.h"
#include "router/rules/turn_rules.h"

namespace moe::cuda::detail {

constexpr uint64_t kNoKey = ~uint64_t{0};
constexpr int64_t kUnlimited = INT64_MAX;
constexpr int kCapacityChunk = 256;  // requests per partial sum of the causal/sequence capacity
// Validation keys: a duplicate row is its claiming index i; a routing-state error is kStateError | i << 2 |
// kind, so the minimum is the error the CPU reports first (every duplicate check runs before the state checks
// there, which visit requests in order and, in a request, admission before positions).
constexpr uint64_t kStateError = uint64_t{1} << 62;
enum StateErrorKind : uint64_t { kNotAdmitted = 0, kBadPosition = 1, kRowMismatch = 2 };

struct TokenStats {
  int64_t kept = 0, rerouted = 0, dropped = 0, fully_dropped = 0;
};
struct StatsSum {
  MOE_HD TokenStats operator()(const TokenStats& a, const TokenStats& b) const {
    TokenStats s;
    s.kept = a.kept + b.kept;
    s.rerouted = a.rerouted + b.rerouted;
    s.dropped = a.dropped + b.dropped;
    s.fully_dropped = a.fully_dropped + b.fully_dropped;
    return s;
  }
};

// Everything the steps read or write: shape, policy, inputs, outputs and workspace, as plain values.
struct Ctx {
  int T, E, k, R, P;
  DispatchPolicy policy;
  CapacityScope scope;  // policy.scope
  bool reroute;         // policy.overflow == Overflow::kReroute
  int64_t batch_capacity;
  PlanKeyBits bits;

  const int32_t* experts;
  const float* weights;
  const float* top1;
  const TokenMeta* meta;
  const int32_t* state_row;
  int32_t* held;
  uint32_t* next_position;
  const uint32_t* prompt_length;
  const uint32_t* turn_ends;    // PlanInputs::state_turn_ends (nullptr: every request one turn)
  const int32_t* turn_offsets;  // PlanInputs::state_turn_offsets
  int32_t* higher_choices;

  int32_t* pair_expert;
  int32_t* pair_slot;
  float* pair_weight;
  PairStatus* pair_status;
  int32_t* load;
  int64_t* capacity;
  int32_t* offsets;
  int32_t* slot_pairs;
  int64_t* counts;
  PlanError* error;

  uint64_t* token_key;
  int32_t* order;
  int32_t* inv_order;
  int32_t* group_of;
  int32_t* group_begin;
  int64_t* group_cap;
  int64_t* group_cap_sum;
  TokenStats* stats;
  uint64_t* pair_key;
  int32_t* pair_val;
  int32_t* pair_aux;
  int32_t* overflow;
  int32_t* group_counts;
  int32_t* group_higher;
  int64_t* capacity_partial;

  MOE_HD bool grouped() const { return rules::pools_per_request(policy); }
  MOE_HD bool sequence() const { return rules::pools_prompt(policy); }
  // The state row of group g's request (-1: none).
  MOE_HD int group_row(int g) const { return state_row ? state_row[order[group_begin[g]]] : -1; }
  MOE_HD int num_groups() const { return group_of[T - 1] + 1; }
  MOE_HD rules::RouteArrays routes() const { return rules::RouteArrays{experts, weights, k, R}; }
  // Causal budget of a token at `position`.
  MOE_HD int64_t budget(uint32_t position) const { return rules::causal_budget(policy, position, k, E); }
  // Capacity of pool g (pooled scopes).
  MOE_HD int64_t pool_capacity(int g) const {
    if (scope == CapacityScope::kBatch) return batch_capacity;
    if (scope == CapacityScope::kNone) return kUnlimited;
    return group_cap[g];
  }
  MOE_HD void place(int64_t pair, int32_t e, int32_t slot, float w, PairStatus status) const {
    pair_expert[pair] = e;
    pair_slot[pair] = slot;
    pair_weight[pair] = w;
    pair_status[pair] = status;
  }
};

// Records pairs the rules place inside one pool: the slot within the pool is the pool's count before the pair
// took it, less what the request held before this batch (`base`, causal scope; null otherwise).
struct PoolPlacer {
  const Ctx* c;
  const int32_t* base;
  MOE_HD void operator()(int64_t pair, int32_t e, float w, PairStatus status, int32_t held_before) const {
    c->place(pair, e, held_before - (base ? base[e] : 0), w, status);
  }
};

// ---- Initialisation -------------------------------------------------------------------------------------
struct InitPairs {
  Ctx c;
  MOE_HD void operator()(int p) const {
    c.place(p, -1, -1, 0.0f, PairStatus::kDropped);
    c.slot_pairs[p] = -1;
  }
};
struct InitExperts {
  Ctx c;
  MOE_HD void operator()(int e) const {
    if (e < c.E) c.load[e] = 0;
    c.offsets[e] = 0;
  }
};
struct InitScalars {
  Ctx c;
  MOE_HD void operator()(int) const {
    *c.error = PlanError{};
    for (int i = 0; i < 4; ++i) c.counts[i] = 0;
  }
};
struct Iota {
  int32_t* p;
  MOE_HD void operator()(int i) const { p[i] = i; }
};
struct FillInt {
  int32_t* p;
  int32_t v;
  MOE_HD void operator()(int i) const { p[i] = v; }
};

// ---- Claiming order ---------------------------------------------------------------------------------------
enum class TokenKey { kPosition, kRequest, kScore, kRandom };
struct MakeTokenKey {
  Ctx c;
  TokenKey kind;
  MOE_HD void operator()(int i) const {
    const int t = c.order[i];
    uint64_t key = 0;
    switch (kind) {
      case TokenKey::kPosition:
        key = c.meta[t].position;
        break;
      case TokenKey::kRequest:
        key = c.meta[t].request_id;
        break;
      case TokenKey::kScore:
        key = rules::descending_key(c.top1[t]);
        break;
      case TokenKey::kRandom:
        key = rules::random_priority_key(c.policy.seed, c.meta[t].request_id, c.meta[t].position);
        break;
    }
    c.token_key[i] = key;
  }
};

// Group heads into pair_aux (as 0/1) and the inverse order.
struct GroupHeads {
  Ctx c;
  MOE_HD void operator()(int i) const {
    c.inv_order[c.order[i]] = i;
    const bool head =
        i == 0 || (c.grouped() && c.meta[c.order[i]].request_id != c.meta[c.order[i - 1]].request_id);
    c.pair_aux[i] = head ? 1 : 0;
  }
};
// group_of holds the inclusive scan of the heads; make it 0-based and record where groups begin.
struct GroupBegins {
  Ctx c;
  MOE_HD void operator()(int i) const {
    const int g = c.group_of[i] - 1;
    c.group_of[i] = g;
    if (c.pair_aux[i]) c.group_begin[g] = i;
    if (i == c.T - 1) c.group_begin[g + 1] = c.T;
  }
};

// ---- Validation -------------------------------------------------------------------------------------------
// token_key[i] = the validation key of claiming index i (kNoKey: fine); the minimum is the first error.
struct ValidateTokens {
  Ctx c;
  bool check_distinct;
  bool check_state;  // causal scope; sequence scope with a state table
  MOE_HD void operator()(int i) const {
    uint64_t v = kNoKey;
    const int t = c.order[i];
    if (check_distinct && i > 0) {
      const TokenMeta& a = c.meta[c.order[i - 1]];
      const TokenMeta& b = c.meta[t];
      if (a.request_id == b.request_id && a.position == b.position) v = static_cast<uint64_t>(i);
    }
    if (v == kNoKey && check_state) {
      const int g = c.group_of[i];
      const int b = c.group_begin[g];
      const int row = c.group_row(g);
      auto state_error = [&](StateErrorKind kind) {
        return kStateError | static_cast<uint64_t>(i) << 2 | kind;
      };
      if (c.sequence() && (row < 0 || c.prompt_length[row] == 0)) {
        if (i == b) v = state_error(kNotAdmitted);  // reported once, at the request's first row
      } else {
        const uint32_t expected = (row >= 0 ? c.next_position[row] : 0u) + static_cast<uint32_t>(i - b);
        if (c.meta[t].position != expected) {
          v = state_error(kBadPosition);
        } else if (c.state_row && c.state_row[t] != row) {
          v = state_error(kRowMismatch);
        }
      }
    }
    c.token_key[i] = v;
  }
};
struct WriteError {
  Ctx c;
  MOE_HD void operator()(int) const {
    const uint64_t v = c.token_key[c.T - 1];
    if (v == kNoKey) return;
    PlanError err;
    if (v < kStateError) {
      const int i = static_cast<int>(v);
      const int t = c.order[i];
      err.code = kPlanDuplicateToken;
      err.request_id = c.meta[t].request_id;
      err.position = c.meta[t].position;
      err.row_a = c.order[i - 1];
      err.row_b = t;
      *c.error = err;
      return;
    }
    const int i = static_cast<int>((v & (kStateError - 1)) >> 2);
    const uint64_t kind = v & 3;
    const int t = c.order[i];
    const int g = c.group_of[i];
    const int b = c.group_begin[g];
    err.request_id = c.meta[t].request_id;
    err.position = c.meta[t].position;
    err.row_a = c.order[b];
    err.row_b = t;
    if (kind == kNotAdmitted) {
      err.code = kPlanNotAdmitted;
    } else {
      const int row = c.group_row(g);
      err.code = kind == kBadPosition ? kPlanNonContiguousPosition : kPlanStateRowMismatch;
      err.expected = (row >= 0 ? c.next_position[row] : 0u) + static_cast<uint32_t>(i - b);
    }
    *c.error = err;
  }
};

// ---- Capacities -------------------------------------------------------------------------------------------
struct GroupCapacity {  // request scope: each pool's budget from its own token count
  Ctx c;
  MOE_HD void operator()(int g) const {
    if (g >= c.num_groups()) {
      c.group_cap[g] = 0;
      return;
    }
    const int64_t size = c.group_begin[g + 1] - c.group_begin[g];
    c.group_cap[g] = rules::request_capacity(c.policy, size, c.k, c.E);
  }
};
struct ExpertCapacity {
  Ctx c;
  MOE_HD void operator()(int e) const {
    switch (c.scope) {
      case CapacityScope::kBatch:
        c.capacity[e] = c.batch_capacity;
        break;
      case CapacityScope::kNone:
        c.capacity[e] = -1;
        break;
      case CapacityScope::kRequest:
        c.capacity[e] = c.T > 0 ? c.group_cap_sum[c.T - 1] : 0;
        break;
      case CapacityScope::kCausal:
      case CapacityScope::kSequence:
      case CapacityScope::kPrefix: {
        // Sum over requests of (budget of the request's last pool - slots held before this batch), at least
        // 0, plus the decode rows' slots (sequence): the partial sums of StatefulCapacityPartial, added in
        // chunk order.
        int64_t sum = 0;
        if (c.T > 0) {
          const int chunks = (c.num_groups() + kCapacityChunk - 1) / kCapacityChunk;
          for (int chunk = 0; chunk < chunks; ++chunk)
            sum += c.capacity_partial[static_cast<int64_t>(chunk) * c.E + e];
        }
        c.capacity[e] = sum;
        break;
      }
    }
  }
};

// The turn ends of group g's request under sequence scope (router/rules/turn_rules.h) and the position of its
// first row: its state row's turns (a conversation's list, or {L} held in `single`); without a state the
// group's rows are its whole prompt ({T_r}, from position 0). Positions are contiguous from the row's next
// position (validated before).
MOE_HD inline rules::TurnEnds group_turns(const Ctx& c, int g, uint32_t& single, uint32_t& first_position) {
  const int gb = c.group_begin[g], ge = c.group_begin[g + 1];
  const int row = c.group_row(g);
  if (row < 0) {
    single = static_cast<uint32_t>(ge - gb);
    first_position = 0;
    return rules::TurnEnds{&single, 1};
  }
  first_position = c.next_position[row];
  if (c.turn_offsets != nullptr && c.turn_offsets[row + 1] - c.turn_offsets[row] > 1) {
    return rules::TurnEnds{c.turn_ends + c.turn_offsets[row], c.turn_offsets[row + 1] - c.turn_offsets[row]};
  }
  single = c.prompt_length[row];
  return rules::TurnEnds{&single, 1};
}

// Causal/sequence capacity in two parallel passes (requests x experts can be 16k x 256 in a decode batch):
// per request, its last pool's budget (group_cap), its decode rows' slots (group_cap_sum, sequence) and its
// state row (pair_aux); then per (chunk of requests, expert) a partial sum.
struct StatefulGroupInfo {
  Ctx c;
  MOE_HD void operator()(int g) const {
    if (g >= c.num_groups()) return;
    const int b = c.group_begin[g], bn = c.group_begin[g + 1];
    c.pair_aux[g] = c.group_row(g);
    if (!c.sequence()) {
      c.group_cap[g] = c.budget(c.meta[c.order[bn - 1]].position);
      c.group_cap_sum[g] = 0;
      return;
    }
    // The prompt pool's budget at the batch's last prompt row (sequence scope: its turn's whole prompt's),
    // and the decode rows' slots.
    uint32_t single = 0, first = 0;
    const rules::TurnEnds turns = group_turns(c, g, single, first);
    int64_t cap = 0, decode_rows = 0;
    rules::for_each_turn_run(
        turns, first, b, bn,
        [&](int32_t i0, int32_t i1, uint32_t position, uint32_t turn_length) {
          cap = rules::prompt_budget(c.policy, position + static_cast<uint32_t>(i1 - 1 - i0), turn_length,
                                     c.k, c.E);
        },
        [&](int32_t i0, int32_t i1) { decode_rows += i1 - i0; });
    c.group_cap[g] = cap;
    c.group_cap_sum[g] = decode_rows * rules::request_capacity(c.policy, 1, c.k, c.E);
  }
};
struct StatefulCapacityPartial {
  Ctx c;
  MOE_HD void operator()(int x) const {
    const int chunk = x / c.E, e = x % c.E;
    const int groups = c.num_groups();
    const int g0 = chunk * kCapacityChunk;
    const int g1 = g0 + kCapacityChunk < groups ? g0 + kCapacityChunk : groups;
    int64_t sum = 0;
    for (int g = g0; g < g1; ++g) {
      const int row = c.pair_aux[g];
      const int64_t held = row >= 0 ? c.held[static_cast<int64_t>(row) * c.E + e] : 0;
      const int64_t room = c.group_cap[g] - held;
      sum += (room > 0 ? room : 0) + c.group_cap_sum[g];
    }
    c.capacity_partial[x] = sum;
  }
};

// ---- Pooled scopes: kept pairs by rank --------------------------------------------------------------------
struct ClaimKeys {
  Ctx c;
  MOE_HD void operator()(int p) const {
    const int t = p / c.k, j = p % c.k;
    const int32_t e = c.experts[static_cast<int64_t>(t) * c.R + j];
    uint64_t key = kNoKey;
    if (e >= 0) {
      const int i = c.inv_order[t];
      const uint64_t g = static_cast<uint64_t>(c.group_of[i]);
      const PlanKeyBits& b = c.bits;
      key = (g << (b.expert + b.choice + b.index)) | (static_cast<uint64_t>(e) << (b.choice + b.index)) |
            (static_cast<uint64_t>(j) << b.index) | static_cast<uint64_t>(i);
    }
    c.pair_key[p] = key;
    c.pair_val[p] = p;
  }
};
// pair_aux[p] = p at the first element of each run of keys with equal key >> shift, else 0 (then max-scan).
struct RunHeads {
  const uint64_t* key;
  int32_t* aux;
  int shift;
  MOE_HD void operator()(int p) const {
    aux[p] = (p == 0 || (key[p] >> shift) != (key[p - 1] >> shift)) ? p : 0;
  }
};
struct DecidePooled {
  Ctx c;
  bool keep_counts;
  MOE_HD void operator()(int p) const {
    const uint64_t key = c.pair_key[p];
    if (key == kNoKey) return;
    const PlanKeyBits& b = c.bits;
    const int shift = b.choice + b.index;
    const int pair = c.pair_val[p];
    const int t = pair / c.k, j = pair % c.k;
    const int32_t e = static_cast<int32_t>((key >> shift) & ((uint64_t{1} << b.expert) - 1));
    const int g = static_cast<int>(key >> (b.expert + shift));
    const int64_t rank = p - c.pair_aux[p];
    const int64_t cap = c.pool_capacity(g);
    if (rank < cap) {
      c.place(pair, e, static_cast<int32_t>(rank), c.weights[static_cast<int64_t>(t) * c.R + j],
              PairStatus::kKept);
    } else if (c.reroute) {
      // Position of this pair in its pool's claiming order (choice-major): the overflow queue's order.
      const int i = static_cast<int>(key & ((uint64_t{1} << b.index) - 1));
      const int gb = c.group_begin[g], ge = c.group_begin[g + 1];
      const int64_t claim = int64_t{c.k} * gb + int64_t{j} * (ge - gb) + (i - gb);
      c.overflow[claim] = pair;
    }
    if (keep_counts && (p == c.P - 1 || (c.pair_key[p + 1] >> shift) != (key >> shift))) {
      const int64_t demand = rank + 1;
      c.group_counts[static_cast<int64_t>(g) * c.E + e] = static_cast<int32_t>(demand < cap ? demand : cap);
    }
  }
};
struct OverflowFlags {
  Ctx c;
  MOE_HD void operator()(int q) const { c.pair_aux[q] = (q < c.P && c.overflow[q] >= 0) ? 1 : 0; }
};
struct CompactOverflow {
  Ctx c;
  MOE_HD void operator()(int q) const {
    if (c.overflow[q] >= 0) c.pair_val[c.pair_aux[q]] = c.overflow[q];
  }
};
// One thread per pool: its overflowing pairs in claiming order, as the CPU's overflow_ loop.
struct ReroutePooled {
  Ctx c;
  MOE_HD void operator()(int g) const {
    if (g >= c.num_groups()) return;
    const int gb = c.group_begin[g], ge = c.group_begin[g + 1];
    const int from = c.pair_aux[int64_t{c.k} * gb], to = c.pair_aux[int64_t{c.k} * ge];
    const int64_t cap = c.pool_capacity(g);
    int32_t* count = c.group_counts + static_cast<int64_t>(g) * c.E;
    const PoolPlacer place{&c, nullptr};
    for (int q = from; q < to; ++q) {
      rules::try_reroute(c.routes(), c.policy.reroute_depth, c.pair_val[q], c.pair_expert, cap, count, place);
    }
  }
};

// ---- Causal scope: one thread per request -----------------------------------------------------------------
struct DecideCausal {
  Ctx c;
  MOE_HD void operator()(int g) const {
    if (c.error->code != kPlanOk || g >= c.num_groups()) return;
    const int gb = c.group_begin[g], ge = c.group_begin[g + 1];
    const int row = c.state_row ? c.state_row[c.order[gb]] : -1;
    const int32_t* base = row >= 0 ? c.held + static_cast<int64_t>(row) * c.E : nullptr;
    int32_t* count = c.group_counts + static_cast<int64_t>(g) * c.E;
    for (int e = 0; e < c.E; ++e) count[e] = base ? base[e] : 0;
    const PoolPlacer place{&c, base};
    auto budget = [&](uint32_t position) { return c.budget(position); };
    rules::decide_in_position_order(c.routes(), c.policy, c.order, gb, ge, c.meta, budget, count,
                                    c.pair_expert, c.pair_status, place);
    if (row >= 0) {
      int32_t* held = c.held + static_cast<int64_t>(row) * c.E;
      for (int e = 0; e < c.E; ++e) held[e] = count[e];
      c.next_position[row] = c.meta[c.order[ge - 1]].position + 1;
    }
  }
};

// ---- Sequence scope: one thread per request ---------------------------------------------------------------
// Records a decode row's pair: after the request's prompt placements at e, in row order (the CPU's slot order
// within the request). local[e] counts the request's placements at e in this batch.
struct DecodePlacer {
  const Ctx* c;
  int32_t* local;
  MOE_HD void operator()(int64_t pair, int32_t e, float w, PairStatus status, int32_t /*held_before*/) const {
    c->place(pair, e, local[e]++, w, status);
  }
};
struct DecideSequence {
  Ctx c;
  MOE_HD void operator()(int g) const {
    if (c.error->code != kPlanOk || g >= c.num_groups()) return;
    const int gb = c.group_begin[g], ge = c.group_begin[g + 1];
    const int row = c.group_row(g);
    int32_t* held = row >= 0 ? c.held + static_cast<int64_t>(row) * c.E : nullptr;
    const int64_t counts_size = rules::prompt_choice_counts_size(c.k, c.E);
    int32_t* higher = row >= 0 ? c.higher_choices + static_cast<int64_t>(row) * counts_size
                               : c.group_higher + static_cast<int64_t>(g) * counts_size;
    int32_t* count = c.group_counts + static_cast<int64_t>(g) * c.E;
    for (int e = 0; e < c.E; ++e) count[e] = held ? held[e] : 0;
    if (!held) {
      for (int64_t i = 0; i < counts_size; ++i) higher[i] = 0;
    }
    // Every run of a turn's prompt rows into the prompt pool (under that turn's length), then the decode
    // rows: the CPU planner's order.
    uint32_t single = 0, first = 0;
    const rules::TurnEnds turns = group_turns(c, g, single, first);
    const PoolPlacer pool{&c, held};
    rules::for_each_turn_run(
        turns, first, gb, ge,
        [&](int32_t i0, int32_t i1, uint32_t position, uint32_t turn_length) {
          const int64_t capacity = rules::request_capacity(c.policy, turn_length, c.k, c.E);
          rules::decide_prompt_pool(c.routes(), c.policy, c.E, c.order, i0, i1, position, turn_length,
                                    rules::PromptCapacity{&c.policy, c.k, c.E, turn_length, capacity}, count,
                                    higher, c.pair_expert, c.pair_status, pool);
        },
        [](int32_t, int32_t) {});
    // The prompt's counts go to the state; count becomes the placements of this batch (decode rows follow).
    for (int e = 0; e < c.E; ++e) {
      if (held) {
        const int32_t before = held[e];
        held[e] = count[e];
        count[e] -= before;
      }
    }
    if (row >= 0) c.next_position[row] = c.meta[c.order[ge - 1]].position + 1;
    const int64_t decode_capacity = rules::request_capacity(c.policy, 1, c.k, c.E);
    rules::for_each_turn_run(
        turns, first, gb, ge, [](int32_t, int32_t, uint32_t, uint32_t) {},
        [&](int32_t i0, int32_t i1) {
          rules::keep_decode_rows(c.routes(), c.order, i0, i1, decode_capacity, DecodePlacer{&c, count});
        });
  }
};

// ---- Slots ------------------------------------------------------------------------------------------------
struct LoadFromCounts {  // batch/none: the single pool's counts are the loads
  Ctx c;
  MOE_HD void operator()(int e) const { c.load[e] = c.group_counts[e]; }
};
struct ScatterSlots {
  Ctx c;
  MOE_HD void operator()(int p) const {
    if (c.pair_status[p] == PairStatus::kDropped) return;
    c.slot_pairs[c.offsets[c.pair_expert[p]] + c.pair_slot[p]] = p;
  }
};
struct SlotKeys {  // request/causal/sequence: [expert | group | slot within group]
  Ctx c;
  MOE_HD void operator()(int p) const {
    uint64_t key = kNoKey;
    if (c.pair_status[p] != PairStatus::kDropped) {
      const PlanKeyBits& b = c.bits;
      const uint64_t g = static_cast<uint64_t>(c.group_of[c.inv_order[p / c.k]]);
      key = (static_cast<uint64_t>(c.pair_expert[p]) << (b.group + b.local)) | (g << b.local) |
            static_cast<uint64_t>(c.pair_slot[p]);
    }
    c.pair_key[p] = key;
    c.pair_val[p] = p;
  }
};
struct AssignSlots {
  Ctx c;
  MOE_HD void operator()(int p) const {
    const uint64_t key = c.pair_key[p];
    if (key == kNoKey) return;
    const int shift = c.bits.group + c.bits.local;
    const int pair = c.pair_val[p];
    const int32_t slot = p - c.pair_aux[p];
    c.pair_slot[pair] = slot;
    c.slot_pairs[p] = pair;
    if (p == c.P - 1 || (c.pair_key[p + 1] >> shift) != (key >> shift)) {
      c.load[static_cast<int>(key >> shift)] = slot + 1;
    }
  }
};

// ---- Totals -----------------------------------------------------------------------------------------------
struct FinishTokens {
  Ctx c;
  MOE_HD void operator()(int t) const {
    TokenStats s;
    float survivors = 0.0f;
    for (int j = 0; j < c.k; ++j) {
      const int64_t pair = int64_t{t} * c.k + j;
      const PairStatus status = c.pair_status[pair];
      if (status == PairStatus::kDropped) {
        ++s.dropped;
        continue;
      }
      if (status == PairStatus::kKept) {
        ++s.kept;
      } else {
        ++s.rerouted;
      }
      survivors += c.pair_weight[pair];
    }
    if (s.dropped == c.k) s.fully_dropped = 1;
    if (c.policy.renormalize_survivors) {
      rules::renormalize_survivors(c.k, static_cast<int>(s.dropped), survivors, c.weights + int64_t{t} * c.R,
                                   c.pair_weight + int64_t{t} * c.k);
    }
    c.stats[t] = s;
  }
};
struct WriteCounts {
  Ctx c;
  MOE_HD void operator()(int) const {
    const TokenStats s = c.stats[c.T - 1];
    c.counts[0] = s.kept;
    c.counts[1] = s.rerouted;
    c.counts[2] = s.dropped;
    c.counts[3] = s.fully_dropped;
  }
};

template <class Exec, class F>
void for_n(const Exec& exec, int64_t n, F f) {
  if (n > 0) thrust::for_each_n(exec, thrust::counting_iterator<int>(0), n, f);
}

template <class T>
T* at(void* base, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

// Stable sort of (key, value) pairs by the key's low `end_bit` bits (every key the planner sorts is below
// 2^end_bit, except kNoKey, whose low bits are all ones and so still sort last). The generic version sorts
// with Thrust by the masked key; the CUDA launcher passes CUB's radix sort over bits [0, end_bit) instead,
// which orders identically (LSD radix sort is stable).
struct MaskedLess {
  uint64_t mask;
  MOE_HD bool operator()(uint64_t a, uint64_t b) const { return (a & mask) < (b & mask); }
};
template <class Exec>
struct ThrustSorter {
  const Exec& exec;
  void operator()(uint64_t* keys, int32_t* vals, int n, int end_bit) const {
    const uint64_t mask = end_bit >= 64 ? ~uint64_t{0} : (uint64_t{1} << end_bit) - 1;
    thrust::stable_sort_by_key(exec, keys, keys + n, vals, MaskedLess{mask});
  }
};

// Plans one batch. `shape` is validated by the caller; `workspace` holds PlanWorkspaceLayout(shape).bytes.
// sort(keys, vals, n, end_bit): a stable sort as ThrustSorter's, on the same stream/policy as `exec`.
template <class Exec, class Sort>
void run_plan(const Exec& exec, const Sort& sort, const PlanShape& shape, const PlanInputs& in,
              const PlanOutputs& out, void* workspace) {
  const DispatchPolicy& policy = shape.policy;
  const PlanWorkspaceLayout layout(shape);
  Ctx c{};
  c.T = in.num_tokens;
  c.E = shape.num_experts;
  c.k = shape.top_k;
  c.R = shape.num_ranked;
  c.P = c.T * c.k;
  c.policy = policy;
  c.scope = policy.scope;
  c.reroute = policy.overflow == Overflow::kReroute;
  c.batch_capacity = plan_batch_capacity(shape, c.T);
  c.bits = PlanKeyBits(c.T, c.E, c.k, c.scope);
  c.experts = in.route_experts;
  c.weights = in.route_weights;
  c.top1 = in.top1_score;
  c.meta = in.meta;
  c.state_row = in.token_state_row;
  c.held = in.state_slots_held;
  c.next_position = in.state_next_position;
  c.prompt_length = in.state_prompt_length;
  c.turn_ends = in.state_turn_ends;
  c.turn_offsets = in.state_turn_offsets;
  c.higher_choices = in.state_higher_choices;
  c.pair_expert = out.pair_expert;
  c.pair_slot = out.pair_slot;
  c.pair_weight = out.pair_weight;
  c.pair_status = out.pair_status;
  c.load = out.expert_load;
  c.capacity = out.expert_capacity;
  c.offsets = out.expert_offsets;
  c.slot_pairs = out.slot_pairs;
  c.counts = out.counts;
  c.error = out.error;
  c.token_key = at<uint64_t>(workspace, layout.token_key);
  c.order = at<int32_t>(workspace, layout.order);
  c.inv_order = at<int32_t>(workspace, layout.inv_order);
  c.group_of = at<int32_t>(workspace, layout.group_of);
  c.group_begin = at<int32_t>(workspace, layout.group_begin);
  c.group_cap = at<int64_t>(workspace, layout.group_cap);
  c.group_cap_sum = at<int64_t>(workspace, layout.group_cap_sum);
  c.stats = at<TokenStats>(workspace, layout.token_stats);
  c.pair_key = at<uint64_t>(workspace, layout.pair_key);
  c.pair_val = at<int32_t>(workspace, layout.pair_val);
  c.pair_aux = at<int32_t>(workspace, layout.pair_aux);
  c.overflow = at<int32_t>(workspace, layout.overflow);
  c.group_counts = at<int32_t>(workspace, layout.group_counts);
  c.group_higher = at<int32_t>(workspace, layout.group_higher);
  c.capacity_partial = at<int64_t>(workspace, layout.capacity_partial);

  const int T = c.T, P = c.P, E = c.E;
  for_n(exec, 1, InitScalars{c});
  for_n(exec, P, InitPairs{c});
  for_n(exec, E + 1, InitExperts{c});
  if (T == 0) {
    for_n(exec, E, ExpertCapacity{c});
    return;
  }

  // 1. Claiming order: stable sorts, least significant key first.
  const bool by_request = rules::orders_by_request(c.policy);
  for_n(exec, T, Iota{c.order});
  auto sort_tokens = [&](TokenKey kind) {
    for_n(exec, T, MakeTokenKey{c, kind});
    sort(c.token_key, c.order, T, kind == TokenKey::kPosition || kind == TokenKey::kScore ? 32 : 64);
  };
  if (by_request) {
    sort_tokens(TokenKey::kPosition);
    sort_tokens(TokenKey::kRequest);
  } else if (c.policy.priority == Priority::kScore) {
    sort_tokens(TokenKey::kScore);
  } else if (c.policy.priority == Priority::kRandom) {
    sort_tokens(TokenKey::kRandom);
  }
  if (c.scope == CapacityScope::kRequest && !by_request) sort_tokens(TokenKey::kRequest);

  // 2. Pools.
  for_n(exec, T, GroupHeads{c});
  thrust::inclusive_scan(exec, c.pair_aux, c.pair_aux + T, c.group_of);
  for_n(exec, T, GroupBegins{c});

  // Checks (before anything is written to the routing state).
  const bool check_distinct = by_request;
  const bool check_state = c.scope == CapacityScope::kCausal || (c.sequence() && c.state_row != nullptr);
  if (check_distinct || check_state) {
    for_n(exec, T, ValidateTokens{c, check_distinct, check_state});
    thrust::inclusive_scan(exec, c.token_key, c.token_key + T, c.token_key, thrust::minimum<uint64_t>());
    for_n(exec, 1, WriteError{c});
  }

  // Capacities.
  if (c.scope == CapacityScope::kRequest) {
    for_n(exec, T, GroupCapacity{c});
    thrust::inclusive_scan(exec, c.group_cap, c.group_cap + T, c.group_cap_sum);
  } else if (rules::carries_routing_state(c.policy)) {
    for_n(exec, T, StatefulGroupInfo{c});
    for_n(exec, int64_t{(T + kCapacityChunk - 1) / kCapacityChunk} * E, StatefulCapacityPartial{c});
  }
  for_n(exec, E, ExpertCapacity{c});

  if (c.scope == CapacityScope::kCausal) {
    // 5. Causal decisions, one thread per request.
    for_n(exec, T, DecideCausal{c});
  } else if (c.sequence()) {
    // 5. Sequence decisions, one thread per request.
    for_n(exec, T, DecideSequence{c});
  } else {
    // 3. Kept pairs by rank within (pool, expert) runs.
    const bool single_pool = c.scope != CapacityScope::kRequest;
    const bool keep_counts = single_pool || c.reroute;
    const int count_rows = single_pool ? 1 : T;
    if (keep_counts) for_n(exec, int64_t{count_rows} * E, FillInt{c.group_counts, 0});
    if (c.reroute) for_n(exec, P, FillInt{c.overflow, -1});
    for_n(exec, P, ClaimKeys{c});
    sort(c.pair_key, c.pair_val, P, c.bits.claim_total() + 1);
    for_n(exec, P, RunHeads{c.pair_key, c.pair_aux, c.bits.choice + c.bits.index});
    thrust::inclusive_scan(exec, c.pair_aux, c.pair_aux + P, c.pair_aux, thrust::maximum<int32_t>());
    for_n(exec, P, DecidePooled{c, keep_counts});
    // 4. Reroute: compact the overflow queue in claiming order, then one thread per pool.
    if (c.reroute) {
      for_n(exec, P + 1, OverflowFlags{c});
      thrust::exclusive_scan(exec, c.pair_aux, c.pair_aux + P + 1, c.pair_aux);
      for_n(exec, P, CompactOverflow{c});
      for_n(exec, count_rows, ReroutePooled{c});
    }
    if (single_pool) {
      // 6. Slots are the pool's slots.
      for_n(exec, E, LoadFromCounts{c});
      thrust::inclusive_scan(exec, c.load, c.load + E, c.offsets + 1);
      for_n(exec, P, ScatterSlots{c});
    }
  }
  if (c.grouped()) {
    // 6. Slots across pools: sort placed pairs by [expert | group | slot in group].
    for_n(exec, P, SlotKeys{c});
    sort(c.pair_key, c.pair_val, P, c.bits.slot_total() + 1);
    const int shift = c.bits.group + c.bits.local;
    for_n(exec, P, RunHeads{c.pair_key, c.pair_aux, shift});
    thrust::inclusive_scan(exec, c.pair_aux, c.pair_aux + P, c.pair_aux, thrust::maximum<int32_t>());
    for_n(exec, P, AssignSlots{c});
    thrust::inclusive_scan(exec, c.load, c.load + E, c.offsets + 1);
  }

  // 7. Totals and renormalisation.
  for_n(exec, T, FinishTokens{c});
  thrust::inclusive_scan(exec, c.stats, c.stats + T, c.stats, StatsSum{});
  for_n(exec, 1, WriteCounts{c});
}

}  // namespace moe::cuda::detail
