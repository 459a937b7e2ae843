// Who gets an expert's slots: capacity scope, priority and overflow handling.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moe {

// Where capacity is counted (docs/routing.md section 2; the formulas: router/rules/capacity.h)
//   kBatch     one pool per expert for the whole batch: C = max(min_capacity, round(cf * T * k / E))
//   kRequest   one pool per (request, expert) in this batch: C_r = max(1, min_capacity, round(cf * T_r * k /
//   E)) kCausal    a token at position p may take a slot at e while its request's earlier tokens hold fewer
//   than
//              max(1, min_capacity, round(cf * (p + 1) * k / E)) slots at e; counts carry across calls
//   kSequence  one pool per (request, expert) for the request's whole prompt, sized from the prompt length L
//              it was admitted with: C = max(1, min_capacity, round(cf * L * k / E)), claimed in (position,
//              j) order across forward passes (counts carry in the RoutingState); each decode row (position
//              >= L) is a pool of its own, C = max(1, min_capacity, round(cf * k / E)). Without a state, a
//              request's rows in the batch are its whole prompt (L = T_r).
//   kPrefix    sequence scope whose budget at the prompt row at position p is sized from the prompt up to
//              its horizon h = min(L, p + 1 + lookahead) instead of the whole prompt: the routing of
//              positions 0..p depends on L only when L < p + 1 + lookahead, so a cached prefix of P positions
//              routes the same for every prompt of at least P + lookahead tokens (prefix caching;
//              docs/routing.md).
//   kNone      dropless
enum class CapacityScope { kBatch, kRequest, kCausal, kSequence, kNone, kPrefix };
enum class CapacityRounding { kCeil, kFloor };
// Order in which pairs claim slots inside one pool (after choice-major ordering):
//   kArrival row order; kRequest ascending (request_id, position); kScore highest top-1 selection score
//   first, ties by arrival; kRandom a permutation of the rows seeded by `seed`.
enum class Priority { kArrival, kRequest, kScore, kRandom };
enum class Overflow { kDrop, kReroute };

struct DispatchPolicy {
  double capacity_factor = 1.25;
  CapacityRounding rounding = CapacityRounding::kCeil;
  int min_capacity = 0;
  CapacityScope scope = CapacityScope::kBatch;
  Priority priority = Priority::kArrival;
  Overflow overflow = Overflow::kDrop;
  int reroute_depth = 1;  // ranks beyond top_k an overflowing pair may try (kReroute only)
  uint64_t seed = 0;      // kRandom only
  // When on, a token that lost pairs has its surviving weights scaled so they sum to the weight of all
  // its k choices (off by default: survivors keep their weights).
  bool renormalize_survivors = false;
  // kPrefix only: how many positions past a prompt row its budget looks ahead (the `lookahead` W of
  // docs/routing.md section 2). kDefaultLookahead is the `stable` mode's.
  uint32_t lookahead = kDefaultLookahead;
  static constexpr uint32_t kDefaultLookahead = 16;

  // The largest capacity factor: far beyond any that drops a pair (cf >= E / k is dropless under batch
  // scope), and small enough that every capacity cf * T * k / E and every sum of them over a batch's pools
  // stays an exact integer far inside int64 (T < 2^32 positions).
  static constexpr double kMaxCapacityFactor = 1e6;

  // Throws std::invalid_argument naming the bad field, e.g. "capacity_factor must be > 0 (got -1)".
  void validate() const;
  // The rule validate() applies to capacity_factor: finite, > 0 and at most kMaxCapacityFactor.
  static void check_capacity_factor(double capacity_factor);

  // Named modes: "greedy" (batch, arrival, drop), "stable" (prefix, request, drop), "rank-only"
  // (batch, request, drop). Other fields keep their defaults. Throws for an unknown name.
  static DispatchPolicy mode(std::string_view name);
  static const std::vector<std::string>& mode_names();
};

// What a policy's rules are, in words: its scope (prefix scope with its lookahead), priority and overflow,
// "prefix scope (lookahead 16), request priority, drop". The one description of a mode's or a preset's rules
// (MoELayerConfig::preset_description, moe-sim's --mode help and the docs test read it).
std::string describe_rules(const DispatchPolicy& policy);
// Every capacity scope's name, in declaration order of the parsers' table (batch, request, causal, sequence,
// prefix, none).
const std::vector<std::string>& capacity_scope_names();

std::string_view to_string(CapacityScope v);
std::string_view to_string(CapacityRounding v);
std::string_view to_string(Priority v);
std::string_view to_string(Overflow v);
// Parsers accept the to_string spellings; they throw std::invalid_argument naming the value and the
// accepted ones.
CapacityScope parse_capacity_scope(std::string_view s);
CapacityRounding parse_capacity_rounding(std::string_view s);
Priority parse_priority(std::string_view s);
Overflow parse_overflow(std::string_view s);

// The capacity and budget formulas of every scope are router/rules/capacity.h (host and device code).

}  // namespace moe
