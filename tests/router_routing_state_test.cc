// RoutingState's serving lifecycle beyond admit/release (docs/routing.md section 2, "Prefix caching"): the
// records a recording state keeps, restoring a request from cached segments, rolling back, the segments'
// byte form, and every misuse as an error that names it and changes nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "router/dispatch_planner.h"
#include "router/routing_state.h"
#include "tests/support/expect_invalid.h"

namespace moe {
namespace {

constexpr int kExperts = 6;
constexpr int kTopK = 2;

using moe::testing::ExpectInvalid;

// Routes of a request's positions [from, from + n): choices from (content, position) only.
TokenRoutes Routes(uint64_t content, uint32_t from, int n) {
  TokenRoutes r;
  r.resize(n, kExperts, kTopK, kTopK + 1);
  for (int t = 0; t < n; ++t) {
    std::mt19937_64 g(content * 1000003 + from + t);
    int a = static_cast<int>(g() % 3), b = static_cast<int>(g() % (kExperts - 1));  // skewed to 0..2
    if (b >= a) ++b;
    int c = (b + 1) % kExperts == a ? (b + 2) % kExperts : (b + 1) % kExperts;
    const int ranked[3] = {a, b, c};
    for (int j = 0; j < 3; ++j) {
      r.experts[t * 3 + j] = ranked[j];
      r.weights[t * 3 + j] = 0.5f / static_cast<float>(j + 1);
    }
    r.top1_score[t] = 0.5f;
  }
  return r;
}

DispatchPolicy Stable(uint32_t lookahead, double cf = 0.75) {
  DispatchPolicy p = DispatchPolicy::mode("stable");
  p.capacity_factor = cf;
  p.lookahead = lookahead;
  p.overflow = Overflow::kReroute;
  return p;
}

// Plans request `id` (content `content`) from its next position in chunks of `chunk` rows up to `end`.
void Serve(DispatchPlanner& planner, RoutingState& state, uint64_t id, uint64_t content, uint32_t end,
           int chunk) {
  DispatchPlan plan;
  for (uint32_t at = state.find(id)->next_position; at < end;) {
    const int n = static_cast<int>(std::min<uint32_t>(chunk, end - at));
    std::vector<TokenMeta> meta;
    for (int i = 0; i < n; ++i) meta.push_back({id, at + static_cast<uint32_t>(i)});
    planner.plan(Routes(content, at, n), meta, &state, plan);
    at += static_cast<uint32_t>(n);
  }
}

void ExpectSameCounts(const RoutingState::Request& a, const RoutingState::Request& b) {
  EXPECT_EQ(a.slots_held, b.slots_held);
  EXPECT_EQ(a.higher_choices, b.higher_choices);
  EXPECT_EQ(a.next_position, b.next_position);
  EXPECT_EQ(a.rule, b.rule);
}

// A request restored from another request's segments of a shared prefix holds the counts it would hold had
// it planned that prefix itself, and records the same routing.
TEST(RoutingStateLifecycle, RestoreRebuildsTheCountsOfThePrefix) {
  for (uint32_t P : {1u, 5u, 16u, 23u, 40u}) {
    SCOPED_TRACE(P);
    const DispatchPolicy p = Stable(8);
    DispatchPlanner planner(kExperts, kTopK, p);
    RoutingState state(kExperts, kTopK, /*record=*/true);
    state.admit(1, 60);  // the writer: prompt of 60 >= P + 8, so its first P positions are anyone's
    Serve(planner, state, 1, /*content=*/9, 45, 7);
    std::vector<RoutingSegment> blocks;
    for (uint32_t b = 0; b < P; b += 4) blocks.push_back(state.segment(1, b, std::min(P, b + 4)));
    state.restore(2, 50, blocks);  // another prompt length with the same salt (0)
    RoutingState alone(kExperts, kTopK, true);
    alone.admit(3, 50);
    Serve(planner, alone, 3, 9, P, 3);
    ExpectSameCounts(*state.find(2), *alone.find(3));
    EXPECT_EQ(state.find(2)->cache_boundary, P);
    EXPECT_EQ(state.segment(2, 0, P).placed, alone.segment(3, 0, P).placed);
    // Both go on alike.
    Serve(planner, state, 2, 9, 58, 5);
    Serve(planner, alone, 3, 9, 58, 11);
    ExpectSameCounts(*state.find(2), *alone.find(3));
    EXPECT_EQ(state.segment(2, 0, 58).placed, alone.segment(3, 0, 58).placed);
  }
}

// Rolling back forgets what the positions added: to the counts (prompt rows, from the records) and to the
// records; decode rows change no count, so a state without records rolls them back too.
TEST(RoutingStateLifecycle, RollbackForgetsThePositions) {
  const DispatchPolicy p = Stable(4);
  DispatchPlanner planner(kExperts, kTopK, p);
  RoutingState state(kExperts, kTopK, true), reference(kExperts, kTopK, true);
  state.admit(1, 20);
  reference.admit(1, 20);
  Serve(planner, state, 1, 5, 17, 17);
  Serve(planner, reference, 1, 5, 9, 9);
  state.rollback(1, 9);
  ExpectSameCounts(*state.find(1), *reference.find(1));
  EXPECT_EQ(state.find(1)->placed, reference.find(1)->placed);
  Serve(planner, state, 1, 5, 26, 4);  // on into decode rows
  Serve(planner, reference, 1, 5, 26, 6);
  ExpectSameCounts(*state.find(1), *reference.find(1));

  RoutingState plain(kExperts, kTopK);  // no records
  plain.admit(1, 20);
  Serve(planner, plain, 1, 5, 24, 24);
  const std::vector<int32_t> held = plain.find(1)->slots_held;
  plain.rollback(1, 21);  // decode rows only
  EXPECT_EQ(plain.find(1)->next_position, 21u);
  EXPECT_EQ(plain.find(1)->slots_held, held);
  ExpectInvalid([&] { plain.rollback(1, 19); }, "state does not record");
  EXPECT_EQ(plain.find(1)->next_position, 21u);
  plain.rollback(1, 21);  // to where it is: nothing to do
}

// Every misuse names itself and changes nothing.
TEST(RoutingStateLifecycle, MisusesAreErrorsThatChangeNothing) {
  const DispatchPolicy p = Stable(8);
  DispatchPlanner planner(kExperts, kTopK, p);
  RoutingState state(kExperts, kTopK, true);
  state.admit(1, 12);  // the writer: L = 12 < 8 + 8, so its prefix of 8 is salted with 12
  Serve(planner, state, 1, 9, 14, 5);
  const std::vector<RoutingSegment> prefix = {state.segment(1, 0, 4), state.segment(1, 4, 8)};
  EXPECT_EQ(prefix_cache_salt(p, 8, 12), 12u);
  auto unchanged = [&] {
    EXPECT_EQ(state.num_requests(), 1u);
    EXPECT_EQ(state.find(2), nullptr);
  };
  ExpectInvalid([&] { state.restore(1, 12, prefix); }, "request 1 is live");
  ExpectInvalid([&] { state.restore(2, 30, prefix); }, "planned for a prompt of 12 tokens");
  unchanged();
  ExpectInvalid([&] { state.restore(2, 0, prefix); }, "prompt_length must be >= 1");
  const std::vector<RoutingSegment> gap = {prefix[1]};
  ExpectInvalid([&] { state.restore(2, 12, gap); },
                "does not continue the prefix (expected it to begin at 0)");
  std::vector<RoutingSegment> shape = prefix;
  shape[1].num_experts = 8;
  ExpectInvalid([&] { state.restore(2, 12, shape); }, "another layer shape");
  std::vector<RoutingSegment> rule = prefix;
  rule[1].rule = RoutingRule::of(Stable(8, 2.0));
  ExpectInvalid([&] { state.restore(2, 12, rule); }, "another rule than segment 0");
  std::vector<RoutingSegment> range = prefix;
  range[0].placed[3] = kExperts;
  ExpectInvalid([&] { state.restore(2, 12, range); }, "names an expert outside [-1, 6)");
  std::vector<RoutingSegment> sizes = prefix;
  sizes[0].choices.pop_back();
  ExpectInvalid([&] { state.restore(2, 12, sizes); }, "holds 7 choices and 8 placements for 8 pairs");
  unchanged();
  // The state of another shape: a RoutingState for 8 experts refuses the segments.
  RoutingState other(8, kTopK, true);
  ExpectInvalid([&] { other.restore(2, 12, prefix); }, "another layer shape");
  EXPECT_EQ(other.num_requests(), 0u);

  state.restore(2, 12, prefix);  // the same salt: fine
  ExpectInvalid([&] { state.rollback(2, 7); }, "positions below 8 came from the prefix cache");
  ExpectInvalid([&] { state.rollback(2, 9); }, "cannot be rolled forward to position 9");
  ExpectInvalid([&] { state.rollback(5, 0); }, "request 5 cannot be rolled back: the state does not hold it");
  ExpectInvalid([&] { state.segment(2, 3, 9); }, "is not within its planned positions [0, 8)");
  EXPECT_EQ(state.find(2)->next_position, 8u);
  // A planner of another rule refuses a request planned (or restored) under this one; nothing changes.
  DispatchPlanner other_rule(kExperts, kTopK, Stable(8, 2.0));
  DispatchPlan plan;
  const std::vector<TokenMeta> row = {{2, 8}};
  ExpectInvalid([&] { other_rule.plan(Routes(9, 8, 1), row, &state, plan); }, "under another rule");
  EXPECT_EQ(state.find(2)->next_position, 8u);
  planner.plan(Routes(9, 8, 1), row, &state, plan);
  EXPECT_EQ(state.find(2)->next_position, 9u);

  RoutingState plain(kExperts, kTopK);
  plain.admit(3, 4);
  ExpectInvalid([&] { plain.segment(3, 0, 0); }, "the state does not record");
  ExpectInvalid([] { RoutingState bad(kExperts, 0, true); }, "a recording state needs its top_k");
}

// The segments' byte form: a round trip, and every malformed input a clear error (docs/fuzzing.md's target).
TEST(RoutingStateLifecycle, SegmentBytesRoundTripAndRefuseMalformedInput) {
  DispatchPlanner planner(kExperts, kTopK, Stable(8));
  RoutingState state(kExperts, kTopK, true);
  state.admit(1, 30);
  Serve(planner, state, 1, 4, 20, 6);
  const RoutingSegment s = state.segment(1, 3, 17);
  const std::vector<uint8_t> bytes = s.serialize();
  const RoutingSegment back = RoutingSegment::parse(bytes);
  EXPECT_EQ(back.num_experts, s.num_experts);
  EXPECT_EQ(back.top_k, s.top_k);
  EXPECT_EQ(back.rule, s.rule);
  EXPECT_EQ(back.prompt_length, s.prompt_length);
  EXPECT_EQ(back.begin, s.begin);
  EXPECT_EQ(back.end, s.end);
  EXPECT_EQ(back.choices, s.choices);
  EXPECT_EQ(back.placed, s.placed);
  EXPECT_EQ(back.serialize(), bytes);

  auto parse = [](std::vector<uint8_t> b) { return RoutingSegment::parse(b); };
  ExpectInvalid([&] { parse({}); }, "too short");
  std::vector<uint8_t> magic = bytes;
  magic[0] = 'X';
  ExpectInvalid([&] { parse(magic); }, "no MOERSEG1 magic");
  std::vector<uint8_t> cut = bytes;
  cut.pop_back();
  ExpectInvalid([&] { parse(cut); }, "bytes where the header announces");
  std::vector<uint8_t> huge = bytes;
  huge[28] = huge[29] = huge[30] = huge[31] = 0xff;  // entries: 2^32 - 1, no allocation follows
  ExpectInvalid([&] { parse(huge); }, "entries for 14 positions");
  std::vector<uint8_t> zero_k = bytes;
  zero_k[12] = 0;
  ExpectInvalid([&] { parse(zero_k); }, "top_k 0 not in [1, num_experts]");
  std::vector<uint8_t> scope = bytes;
  scope[32] = 200;
  ExpectInvalid([&] { parse(scope); }, "unknown scope 200");
}

// The byte layouts, byte for byte (docs/routing.md, "Prefix caching"): a MOERSEG1 segment of a single-turn
// request and a MOERSEG2 segment of a conversation's, little-endian throughout.
TEST(RoutingStateLifecycle, SegmentGoldenBytes) {
  RoutingSegment s;
  s.num_experts = 4;
  s.top_k = 2;
  s.rule.scope = CapacityScope::kPrefix;  // 5
  s.rule.lookahead = 2;
  s.rule.fingerprint = 0x0102030405060708ull;
  s.prompt_length = 6;
  s.begin = 1;
  s.end = 2;
  s.choices = {0, 3};
  s.placed = {0, -1};
  const std::vector<uint8_t> head = {'M', 'O', 'E', 'R', 'S', 'E', 'G', '1',  // magic
                                     4,   0,   0,   0,                        // num_experts
                                     2,   0,   0,   0,                        // top_k
                                     6,   0,   0,   0,                        // prompt_length
                                     1,   0,   0,   0,                        // begin
                                     2,   0,   0,   0,                        // end
                                     2,   0,   0,   0,  // entries = (end - begin) * top_k
                                     5,                 // scope (kPrefix)
                                     2,   0,   0,   0,  // lookahead
                                     8,   7,   6,   5,   4,   3,   2,   1};  // fingerprint
  const std::vector<uint8_t> body = {0, 0, 0, 0, 3,    0,    0,    0,        // choices
                                     0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};    // placed (-1: dropped)
  std::vector<uint8_t> want = head;
  want.insert(want.end(), body.begin(), body.end());
  EXPECT_EQ(s.serialize(), want);
  EXPECT_EQ(RoutingSegment::parse(want).serialize(), want);

  s.turn_ends = {4, 5, 6};  // a conversation: the same fields, magic 2, then the count and the ends
  std::vector<uint8_t> want2 = head;
  want2[7] = '2';
  for (uint8_t b : {3, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0}) want2.push_back(b);
  want2.insert(want2.end(), body.begin(), body.end());
  EXPECT_EQ(s.serialize(), want2);
  const RoutingSegment back = RoutingSegment::parse(want2);
  EXPECT_EQ(back.turn_ends, s.turn_ends);
  EXPECT_EQ(back.choices, s.choices);
  EXPECT_EQ(back.placed, s.placed);

  auto parse = [](std::vector<uint8_t> b) { return RoutingSegment::parse(b); };
  std::vector<uint8_t> bad = want2;
  bad[48] = 0xff;  // turn count 2^24 * 255 + 3: refused before anything is allocated
  ExpectInvalid([&] { parse(bad); }, "turn ends (a conversation has at least 3)");
  bad = want2;
  bad[45] = 2;  // two ends
  ExpectInvalid([&] { parse(bad); }, "turn ends (a conversation has at least 3)");
  bad = want2;
  bad[53] = 4;  // ends 4, 4, 6
  ExpectInvalid([&] { parse(bad); }, "not strictly increasing");
  bad = want2;
  bad[57] = 7;  // ends 4, 5, 7 for a prompt of 6
  ExpectInvalid([&] { parse(bad); }, "is not the prompt length 6");
  bad = want2;
  bad.pop_back();
  ExpectInvalid([&] { parse(bad); }, "bytes where the header announces");
}

// Turn ends are checked wherever a request is admitted or restored.
TEST(RoutingStateLifecycle, TurnEndsAreChecked) {
  RoutingState state(kExperts, kTopK);
  ExpectInvalid([&] { state.admit(1, std::span<const uint32_t>{}); }, "no turn ends");
  const uint32_t even[] = {4, 6};
  ExpectInvalid([&] { state.admit(1, even); }, "an even number of turn ends");
  const uint32_t flat[] = {4, 4, 9};
  ExpectInvalid([&] { state.admit(1, flat); }, "not strictly increasing");
  const uint32_t empty_first[] = {0, 4, 9};
  ExpectInvalid([&] { state.admit(1, empty_first); }, "the first turn's prompt is empty");
  ExpectInvalid([&] { state.restore(1, even, {}); }, "an even number of turn ends");
  EXPECT_EQ(state.num_requests(), 0u);
  const uint32_t ok[] = {4, 6, 9};
  state.admit(1, ok);
  EXPECT_EQ(state.find(1)->prompt_length, 9u);
  EXPECT_EQ(state.find(1)->turn_ends, (std::vector<uint32_t>{4, 6, 9}));
  ExpectInvalid([&] { (void)prefix_cache_salt(Stable(8), 4, std::span<const uint32_t>(even)); },
                "an even number of turn ends");
}

}  // namespace
}  // namespace moe
