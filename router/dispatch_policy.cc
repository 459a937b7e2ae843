#include "router/dispatch_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace moe {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument("dispatch policy: " + msg);
}

// Shortest spelling of a double that reads back exactly ("0", "1e-09", "1.25"), for messages.
std::string number(double v) {
  char buf[32];
  for (int precision = 1; precision < 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) return buf;
  }
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

template <typename Enum, size_t N>
Enum parse_enum(std::string_view what, std::string_view s,
                const std::pair<std::string_view, Enum> (&table)[N]) {
  std::string known;
  for (const auto& [name, value] : table) {
    if (name == s) return value;
    known += (known.empty() ? "" : ", ") + std::string(name);
  }
  throw std::invalid_argument("unknown " + std::string(what) + " '" + std::string(s) + "' (known: " + known +
                              ")");
}

constexpr std::pair<std::string_view, CapacityScope> kScopes[] = {
    {"batch", CapacityScope::kBatch},   {"request", CapacityScope::kRequest},
    {"causal", CapacityScope::kCausal}, {"sequence", CapacityScope::kSequence},
    {"prefix", CapacityScope::kPrefix}, {"none", CapacityScope::kNone}};
constexpr std::pair<std::string_view, CapacityRounding> kRoundings[] = {{"ceil", CapacityRounding::kCeil},
                                                                        {"floor", CapacityRounding::kFloor}};
constexpr std::pair<std::string_view, Priority> kPriorities[] = {{"arrival", Priority::kArrival},
                                                                 {"request", Priority::kRequest},
                                                                 {"score", Priority::kScore},
                                                                 {"random", Priority::kRandom}};
constexpr std::pair<std::string_view, Overflow> kOverflows[] = {{"drop", Overflow::kDrop},
                                                                {"reroute", Overflow::kReroute}};

template <typename Enum, size_t N>
std::string_view name_of(Enum v, const std::pair<std::string_view, Enum> (&table)[N]) {
  for (const auto& [name, value] : table) {
    if (value == v) return name;
  }
  return "?";
}

}  // namespace

void DispatchPolicy::check_capacity_factor(double capacity_factor) {
  if (!std::isfinite(capacity_factor) || capacity_factor <= 0.0) {
    fail("capacity_factor must be finite and > 0 (got " + number(capacity_factor) + ")");
  }
  if (capacity_factor > kMaxCapacityFactor) {
    fail("capacity_factor must be at most 1e6 (got " + number(capacity_factor) +
         "); for no drops at all use scope none");
  }
}

void DispatchPolicy::validate() const {
  check_capacity_factor(capacity_factor);
  if (min_capacity < 0) fail("min_capacity must be >= 0 (got " + std::to_string(min_capacity) + ")");
  if (overflow == Overflow::kReroute && reroute_depth < 1) {
    fail("reroute_depth must be >= 1 when overflow is reroute (got " + std::to_string(reroute_depth) + ")");
  }
  if (reroute_depth < 0) fail("reroute_depth must be >= 0 (got " + std::to_string(reroute_depth) + ")");
}

DispatchPolicy DispatchPolicy::mode(std::string_view name) {
  DispatchPolicy p;
  if (name == "greedy") {
    p.scope = CapacityScope::kBatch;
    p.priority = Priority::kArrival;
  } else if (name == "stable") {
    p.scope = CapacityScope::kPrefix;
    p.priority = Priority::kRequest;
  } else if (name == "rank-only") {
    p.scope = CapacityScope::kBatch;
    p.priority = Priority::kRequest;
  } else {
    std::string known;
    for (const auto& n : mode_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown dispatch mode '" + std::string(name) + "' (known: " + known + ")");
  }
  p.overflow = Overflow::kDrop;
  return p;
}

const std::vector<std::string>& DispatchPolicy::mode_names() {
  static const std::vector<std::string> names = {"greedy", "stable", "rank-only"};
  return names;
}

std::string describe_rules(const DispatchPolicy& p) {
  std::string out = std::string(to_string(p.scope)) + " scope";
  if (p.scope == CapacityScope::kPrefix) out += " (lookahead " + std::to_string(p.lookahead) + ")";
  return out + ", " + std::string(to_string(p.priority)) + " priority, " + std::string(to_string(p.overflow));
}

const std::vector<std::string>& capacity_scope_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [name, value] : kScopes) out.emplace_back(name);
    return out;
  }();
  return names;
}

std::string_view to_string(CapacityScope v) {
  return name_of(v, kScopes);
}
std::string_view to_string(CapacityRounding v) {
  return name_of(v, kRoundings);
}
std::string_view to_string(Priority v) {
  return name_of(v, kPriorities);
}
std::string_view to_string(Overflow v) {
  return name_of(v, kOverflows);
}
CapacityScope parse_capacity_scope(std::string_view s) {
  return parse_enum("capacity scope", s, kScopes);
}
CapacityRounding parse_capacity_rounding(std::string_view s) {
  return parse_enum("capacity rounding", s, kRoundings);
}
Priority parse_priority(std::string_view s) {
  return parse_enum("priority", s, kPriorities);
}
Overflow parse_overflow(std::string_view s) {
  return parse_enum("overflow", s, kOverflows);
}

}  // namespace moe
