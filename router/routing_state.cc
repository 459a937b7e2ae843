#include "router/routing_state.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "router/rules/plan_rules.h"
#include "router/rules/turn_rules.h"

namespace moe {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument("routing state: " + msg);
}

std::string request_name(uint64_t request_id) {
  return "request " + std::to_string(request_id);
}

void check_turns(const std::string& who, std::span<const uint32_t> turn_ends) {
  if (const char* error = rules::turn_ends_error(turn_ends.data(), static_cast<int64_t>(turn_ends.size()))) {
    fail(who + ": " + error);
  }
}

std::string turns_text(std::span<const uint32_t> turns) {
  std::string out = "{";
  for (size_t i = 0; i < turns.size(); ++i) out += (i ? ", " : "") + std::to_string(turns[i]);
  return out + "}";
}

// Whether the row at `position` of `r` changed its counts: every row under causal scope, the prompt rows of
// its turns under sequence and prefix scopes (rules::row_changes_counts, per turn).
bool changes_counts(const RoutingState::Request& r, CapacityScope scope, uint32_t position) {
  if (scope == CapacityScope::kCausal) return true;
  if (r.turn_ends.empty()) return rules::row_changes_counts(scope, position, r.prompt_length);
  return rules::TurnEnds{r.turn_ends.data(), static_cast<int>(r.turn_ends.size())}.is_prompt_row(position);
}

// Adds (sign 1) or removes (sign -1) the contribution of positions [begin, end) to a request's counts, from
// the records choices/placed (row i = position - begin, top_k entries each) under `rule`.
void count_records(RoutingState::Request& r, const RoutingRule& rule, int num_experts, int top_k,
                   uint32_t begin, uint32_t end, const int32_t* choices, const int32_t* placed, int sign) {
  const bool prompt_pool = rule.scope == CapacityScope::kSequence || rule.scope == CapacityScope::kPrefix;
  for (uint32_t p = begin; p < end; ++p) {
    if (!changes_counts(r, rule.scope, p)) continue;
    const size_t row = static_cast<size_t>(p - begin) * top_k;
    for (int j = 0; j < top_k; ++j) {
      if (placed[row + j] >= 0) r.slots_held[placed[row + j]] += sign;
    }
    if (prompt_pool)
      rules::count_prompt_choices(choices + row, top_k, num_experts, r.higher_choices.data(), sign);
  }
}

// Little-endian writer and checked reader of RoutingSegment's byte string.
constexpr char kSegmentMagic[8] = {'M', 'O', 'E', 'R', 'S', 'E', 'G', '1'};
constexpr char kConversationSegmentMagic[8] = {'M', 'O', 'E', 'R', 'S', 'E', 'G', '2'};
constexpr size_t kSegmentHeaderBytes = 8 + 4 * 6 + 1 + 4 + 8;

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
}

template <typename T>
T get(std::span<const uint8_t> in, size_t& at) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t{in[at + i]} << (8 * i);
  at += sizeof(T);
  return static_cast<T>(v);
}

}  // namespace

std::vector<uint8_t> RoutingSegment::serialize() const {
  std::vector<uint8_t> out;
  const bool conversation = turn_ends.size() > 1;
  out.reserve(kSegmentHeaderBytes + (choices.size() + placed.size() + 1 + turn_ends.size()) * 4);
  for (char c : conversation ? kConversationSegmentMagic : kSegmentMagic)
    out.push_back(static_cast<uint8_t>(c));
  put<uint32_t>(out, static_cast<uint32_t>(num_experts));
  put<uint32_t>(out, static_cast<uint32_t>(top_k));
  put<uint32_t>(out, prompt_length);
  put<uint32_t>(out, begin);
  put<uint32_t>(out, end);
  put<uint32_t>(out, static_cast<uint32_t>(choices.size()));
  put<uint8_t>(out, static_cast<uint8_t>(rule.scope));
  put<uint32_t>(out, rule.lookahead);
  put<uint64_t>(out, rule.fingerprint);
  if (conversation) {
    put<uint32_t>(out, static_cast<uint32_t>(turn_ends.size()));
    for (uint32_t end : turn_ends) put<uint32_t>(out, end);
  }
  for (int32_t v : choices) put<uint32_t>(out, static_cast<uint32_t>(v));
  for (int32_t v : placed) put<uint32_t>(out, static_cast<uint32_t>(v));
  return out;
}

RoutingSegment RoutingSegment::parse(std::span<const uint8_t> bytes) {
  auto bad = [](const std::string& what) -> void { fail("routing segment bytes: " + what); };
  if (bytes.size() < kSegmentHeaderBytes) {
    bad("too short (" + std::to_string(bytes.size()) + " bytes, the header alone is " +
        std::to_string(kSegmentHeaderBytes) + ")");
  }
  const bool conversation = std::memcmp(bytes.data(), kConversationSegmentMagic, 8) == 0;
  if (!conversation && std::memcmp(bytes.data(), kSegmentMagic, 8) != 0)
    bad("not a routing segment (no MOERSEG1 magic, nor MOERSEG2)");
  size_t at = 8;
  RoutingSegment s;
  const uint32_t experts = get<uint32_t>(bytes, at), k = get<uint32_t>(bytes, at);
  s.prompt_length = get<uint32_t>(bytes, at);
  s.begin = get<uint32_t>(bytes, at);
  s.end = get<uint32_t>(bytes, at);
  const uint32_t entries = get<uint32_t>(bytes, at);
  const uint8_t scope = get<uint8_t>(bytes, at);
  s.rule.lookahead = get<uint32_t>(bytes, at);
  s.rule.fingerprint = get<uint64_t>(bytes, at);
  if (experts < 1 || experts > (1u << 20)) bad("num_experts " + std::to_string(experts) + " out of range");
  if (k < 1 || k > experts) bad("top_k " + std::to_string(k) + " not in [1, num_experts]");
  if (s.end < s.begin) bad("end " + std::to_string(s.end) + " before begin " + std::to_string(s.begin));
  if (scope > static_cast<uint8_t>(CapacityScope::kPrefix)) bad("unknown scope " + std::to_string(scope));
  if (uint64_t{s.end - s.begin} * k != entries) {
    bad(std::to_string(entries) + " entries for " + std::to_string(s.end - s.begin) + " positions of top_k " +
        std::to_string(k));
  }
  uint64_t header = kSegmentHeaderBytes;
  if (conversation) {
    if (bytes.size() < header + 4) bad("too short for the turn count of a MOERSEG2 segment");
    const uint32_t turns = get<uint32_t>(bytes, at);
    if (turns < 3 || uint64_t{turns} * 4 > bytes.size() - header - 4) {
      bad(std::to_string(turns) + " turn ends (a conversation has at least 3) in " +
          std::to_string(bytes.size()) + " bytes");
    }
    header += 4 + uint64_t{turns} * 4;
    s.turn_ends.resize(turns);
    for (auto& end : s.turn_ends) end = get<uint32_t>(bytes, at);
    if (const char* error = rules::turn_ends_error(s.turn_ends.data(), turns)) bad(error);
    if (s.turn_ends.back() != s.prompt_length) {
      bad("the last turn end " + std::to_string(s.turn_ends.back()) + " is not the prompt length " +
          std::to_string(s.prompt_length));
    }
  }
  if (bytes.size() != header + uint64_t{entries} * 8) {
    bad(std::to_string(bytes.size()) + " bytes where the header announces " +
        std::to_string(header + uint64_t{entries} * 8));
  }
  s.num_experts = static_cast<int>(experts);
  s.top_k = static_cast<int>(k);
  s.rule.scope = static_cast<CapacityScope>(scope);
  s.choices.resize(entries);
  s.placed.resize(entries);
  for (auto& v : s.choices) v = static_cast<int32_t>(get<uint32_t>(bytes, at));
  for (auto& v : s.placed) v = static_cast<int32_t>(get<uint32_t>(bytes, at));
  return s;
}

RoutingState::RoutingState(int num_experts, int top_k, bool record)
    : num_experts_(num_experts), top_k_(top_k), record_(record) {
  if (num_experts < 1) fail("num_experts must be >= 1 (got " + std::to_string(num_experts) + ")");
  if (top_k < 0 || top_k > num_experts) {
    fail("top_k (" + std::to_string(top_k) + ") must be in [0, num_experts=" + std::to_string(num_experts) +
         "] (0: not checked)");
  }
  if (record && top_k == 0) fail("a recording state needs its top_k (got 0)");
}

RoutingState::Request& RoutingState::create(uint64_t request_id, std::span<const uint32_t> turn_ends) {
  Request& r = requests_[request_id];
  r.prompt_length = turn_ends.back();
  r.turn_ends.assign(turn_ends.begin(), turn_ends.end());
  r.slots_held.assign(num_experts_, 0);
  if (top_k_ > 0) r.higher_choices.assign(static_cast<size_t>(top_k_) * num_experts_, 0);
  return r;
}

void RoutingState::admit(uint64_t request_id, uint32_t prompt_length) {
  if (prompt_length == 0) fail(request_name(request_id) + ": prompt_length must be >= 1");
  admit(request_id, std::span<const uint32_t>(&prompt_length, 1));
}

void RoutingState::admit(uint64_t request_id, std::span<const uint32_t> turn_ends) {
  check_turns(request_name(request_id), turn_ends);
  if (requests_.count(request_id) != 0) {
    fail(request_name(request_id) + " is already admitted (release it before admitting it again)");
  }
  create(request_id, turn_ends);
}

void RoutingState::check_restore(uint64_t request_id, uint32_t prompt_length,
                                 std::span<const RoutingSegment> prefix) const {
  if (prompt_length == 0) fail(request_name(request_id) + ": prompt_length must be >= 1");
  check_restore(request_id, std::span<const uint32_t>(&prompt_length, 1), prefix);
}

void RoutingState::check_restore(uint64_t request_id, std::span<const uint32_t> turn_ends,
                                 std::span<const RoutingSegment> prefix) const {
  const std::string who = request_name(request_id);
  check_turns(who, turn_ends);
  if (requests_.count(request_id) != 0) {
    fail(who + " is live: a cached prefix can only be restored onto a request the state does not hold");
  }
  if (prefix.empty()) return;
  const RoutingRule& rule = prefix.front().rule;
  uint32_t expected = 0;
  for (size_t i = 0; i < prefix.size(); ++i) {
    const RoutingSegment& s = prefix[i];
    const std::string seg = who + ": cached segment " + std::to_string(i) + " [" + std::to_string(s.begin) +
                            ", " + std::to_string(s.end) + ")";
    if (s.num_experts != num_experts_ || (top_k_ != 0 && s.top_k != top_k_) || s.top_k < 1) {
      fail(seg + " is for " + std::to_string(s.num_experts) + " experts, top_k " + std::to_string(s.top_k) +
           ", but the state for " + std::to_string(num_experts_) + " experts, top_k " +
           std::to_string(top_k_) + " (a segment of another layer shape)");
    }
    if (s.top_k != prefix.front().top_k)
      fail(seg + " has top_k " + std::to_string(s.top_k) + " unlike segment 0");
    if (s.begin != expected || s.end < s.begin) {
      fail(seg + " does not continue the prefix (expected it to begin at " + std::to_string(expected) + ")");
    }
    const size_t entries = static_cast<size_t>(s.end - s.begin) * s.top_k;
    if (s.choices.size() != entries || s.placed.size() != entries) {
      fail(seg + " holds " + std::to_string(s.choices.size()) + " choices and " +
           std::to_string(s.placed.size()) + " placements for " + std::to_string(entries) + " pairs");
    }
    for (size_t x = 0; x < entries; ++x) {
      if (s.choices[x] < -1 || s.choices[x] >= num_experts_ || s.placed[x] < -1 ||
          s.placed[x] >= num_experts_) {
        fail(seg + " names an expert outside [-1, " + std::to_string(num_experts_) + ")");
      }
    }
    if (!(s.rule == rule)) fail(seg + " was planned under another rule than segment 0");
    if (s.rule.scope == CapacityScope::kSequence || s.rule.scope == CapacityScope::kPrefix)
      check_turns(seg + "'s planning request", s.planned_turns());
    const std::vector<uint32_t> planned = prefix_cache_turns(s.rule, s.end, s.planned_turns());
    const std::vector<uint32_t> wanted = prefix_cache_turns(rule, s.end, turn_ends);
    if (planned != wanted) {
      const std::string salts =
          "prefix_cache_salt " + std::to_string(prefix_cache_salt(s.rule, s.end, s.planned_turns())) +
          ", this request's " + std::to_string(prefix_cache_salt(rule, s.end, turn_ends));
      const std::string why = s.planned_turns().size() == 1 && turn_ends.size() == 1
                                  ? " was planned for a prompt of " + std::to_string(s.prompt_length) +
                                        " tokens and its routing depends on the prompt length (" + salts + ")"
                                  : " was planned for a request of turn ends " +
                                        turns_text(s.planned_turns()) +
                                        " and its routing depends on the turn ends " + turns_text(planned) +
                                        ", this request's on " + turns_text(wanted) + " (" + salts + ")";
      fail(seg + why + ": it is not this request's routing; the prefix cache's key must carry the salt");
    }
    expected = s.end;
  }
}

void RoutingState::restore(uint64_t request_id, uint32_t prompt_length,
                           std::span<const RoutingSegment> prefix) {
  if (prompt_length == 0) fail(request_name(request_id) + ": prompt_length must be >= 1");
  restore(request_id, std::span<const uint32_t>(&prompt_length, 1), prefix);
}

void RoutingState::restore(uint64_t request_id, std::span<const uint32_t> turn_ends,
                           std::span<const RoutingSegment> prefix) {
  check_restore(request_id, turn_ends, prefix);
  if (prefix.empty()) {
    admit(request_id, turn_ends);
    return;
  }
  const RoutingRule& rule = prefix.front().rule;
  const int k = prefix.front().top_k;
  Request r;
  r.prompt_length = turn_ends.back();
  r.turn_ends.assign(turn_ends.begin(), turn_ends.end());
  r.slots_held.assign(num_experts_, 0);
  r.higher_choices.assign(static_cast<size_t>(k) * num_experts_, 0);
  r.rule = rule;
  r.next_position = r.cache_boundary = prefix.back().end;
  for (const RoutingSegment& s : prefix) {
    count_records(r, rule, num_experts_, k, s.begin, s.end, s.choices.data(), s.placed.data(), 1);
    if (record_) {
      r.choices.insert(r.choices.end(), s.choices.begin(), s.choices.end());
      r.placed.insert(r.placed.end(), s.placed.begin(), s.placed.end());
    }
  }
  requests_.emplace(request_id, std::move(r));
}

void RoutingState::check_rollback(uint64_t request_id, uint32_t position) const {
  const std::string who = request_name(request_id);
  const Request* found = find(request_id);
  if (found == nullptr) fail(who + " cannot be rolled back: the state does not hold it");
  const Request& r = *found;
  if (position > r.next_position) {
    fail(who + " cannot be rolled forward to position " + std::to_string(position) +
         " (its next position is " + std::to_string(r.next_position) + ")");
  }
  if (position < r.cache_boundary) {
    fail(who + " cannot be rolled back to position " + std::to_string(position) + ": positions below " +
         std::to_string(r.cache_boundary) + " came from the prefix cache");
  }
  if (!record_ && rolled_back_rows_count(r, position)) {
    fail(who + " cannot be rolled back to position " + std::to_string(position) +
         ": positions from there changed its counts (prompt rows, or any row under causal scope) and the "
         "state does not record (RoutingState(..., record = true))");
  }
}

bool RoutingState::rolled_back_rows_count(const Request& r, uint32_t position) {
  bool counted = false;
  for (uint32_t p = position; p < r.next_position && !counted; ++p) {
    counted = !r.rule.empty() && changes_counts(r, r.rule.scope, p);
  }
  return counted;
}

void RoutingState::rollback(uint64_t request_id, uint32_t position) {
  check_rollback(request_id, position);
  Request& r = requests_.at(request_id);
  if (position == r.next_position) return;
  if (rolled_back_rows_count(r, position)) {
    const int k = top_k_;
    const size_t at = static_cast<size_t>(position) * k;
    count_records(r, r.rule, num_experts_, k, position, r.next_position, r.choices.data() + at,
                  r.placed.data() + at, -1);
  }
  if (record_) {
    r.choices.resize(static_cast<size_t>(position) * top_k_);
    r.placed.resize(static_cast<size_t>(position) * top_k_);
  }
  r.next_position = position;
}

RoutingSegment RoutingState::segment(uint64_t request_id, uint32_t begin, uint32_t end) const {
  const std::string who = request_name(request_id);
  if (!record_) fail("segment(" + who + "): the state does not record (RoutingState(..., record = true))");
  const Request* r = find(request_id);
  if (r == nullptr) fail("segment(" + who + "): the state does not hold it");
  if (begin > end || end > r->next_position) {
    fail("segment(" + who + "): [" + std::to_string(begin) + ", " + std::to_string(end) +
         ") is not within its planned positions [0, " + std::to_string(r->next_position) + ")");
  }
  RoutingSegment s;
  s.num_experts = num_experts_;
  s.top_k = top_k_;
  s.rule = r->rule;
  s.prompt_length = r->prompt_length;
  if (r->turn_ends.size() > 1) s.turn_ends = r->turn_ends;
  s.begin = begin;
  s.end = end;
  const size_t a = static_cast<size_t>(begin) * top_k_, b = static_cast<size_t>(end) * top_k_;
  s.choices.assign(r->choices.begin() + a, r->choices.begin() + b);
  s.placed.assign(r->placed.begin() + a, r->placed.begin() + b);
  return s;
}

void RoutingState::record_rows(std::span<const TokenMeta> rows, const int32_t* choices, int choices_stride,
                               const int32_t* placed) {
  if (!record_) return;
  const int k = top_k_;
  Request* r = nullptr;
  uint64_t current = 0;
  for (size_t t = 0; t < rows.size(); ++t) {
    if (r == nullptr || rows[t].request_id != current) {
      current = rows[t].request_id;
      auto it = requests_.find(current);
      if (it == requests_.end()) fail("record_rows: the state does not hold " + request_name(current));
      r = &it->second;
      const size_t size = static_cast<size_t>(r->next_position) * k;
      if (r->choices.size() < size) {
        r->choices.resize(size, -1);
        r->placed.resize(size, -1);
      }
    }
    if (rows[t].position >= r->next_position) {
      fail("record_rows: " + request_name(current) + " position " + std::to_string(rows[t].position) +
           " was not planned");
    }
    const size_t at = static_cast<size_t>(rows[t].position) * k;
    std::copy_n(choices + t * choices_stride, k, r->choices.data() + at);
    std::copy_n(placed + t * k, k, r->placed.data() + at);
  }
}

void RoutingState::release(uint64_t request_id) {
  if (requests_.erase(request_id) == 0) {
    fail(request_name(request_id) + " cannot be released: the state does not hold it");
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
