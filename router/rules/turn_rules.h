// The turns of a conversation as the stateful scopes read them (docs/routing.md section 2, "Conversations"):
// one definition of which positions of a request are prompt rows and where each prompt row's turn ends, for
// the CPU planner, the routing state's counts and the prefix cache's key.
//
// A request's turn ends are ends[0 .. n), n odd, strictly increasing, ends[0] >= 1:
//   [0, ends[0])             turn 1's prompt          (prompt rows, their turn ends at ends[0])
//   [ends[0], ends[1])       turn 1's answer          (decode rows)
//   [ends[1], ends[2])       turn 2's new message     (prompt rows, their turn ends at ends[2])
//   ...
//   [ends[n-2], ends[n-1])   this turn's new message  (prompt rows; ends[n-1] = L, the prompt length)
//   positions >= L           this turn's answer       (decode rows)
// A single-turn request is {L}: the rules below are then exactly the single-prompt rules. A prompt row at
// position p of the turn ending at B is decided as the row at p of a prompt of length B (its horizon
// min(B, p + 1 + lookahead) under prefix scope, B under sequence scope); the prompt pool's counts run on
// across turns. So a previous turn's positions - its prompt and its answer - route in the next turn exactly
// as they did in their own turn: nothing a position reads depends on turns that end after it begins.
#pragma once

#include <cstdint>

#include "base/host_device.h"

namespace moe::rules {

struct TurnEnds {
  const uint32_t* ends = nullptr;
  int count = 0;  // odd, >= 1

  MOE_HD uint32_t prompt_length() const { return ends[count - 1]; }
  // How many ends are <= position: the index of the segment holding it (even: a prompt segment, odd: an
  // answer, count: this turn's answer).
  MOE_HD int segment_of(uint32_t position) const {
    int lo = 0, hi = count;  // the first end > position, by bisection
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (ends[mid] <= position) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }
  MOE_HD static bool is_prompt_segment(int segment, int count) { return segment < count && segment % 2 == 0; }
  MOE_HD bool is_prompt_row(uint32_t position) const {
    return is_prompt_segment(segment_of(position), count);
  }
  // Where the segment holding `position` ends: its turn's end for a prompt row (the prompt length the row is
  // decided under), the next turn's start for an answer row, UINT32_MAX past L.
  MOE_HD uint32_t segment_end(uint32_t position) const {
    const int s = segment_of(position);
    return s < count ? ends[s] : 0xFFFFFFFFu;
  }
};

// The rows order[begin .. end) of one request, the first at `first_position` (positions contiguous), in runs
// of one segment each, in position order: prompt(i0, i1, position of i0, its turn's length) for a run of a
// turn's prompt rows, decode(i0, i1) for a run of answer or decode rows. A planner decides every prompt run
// first (the prompt pool) and then the decode runs (each row its own pools), calling this twice with one of
// the two callbacks a no-op, so that each pool's pairs take slots in position order.
template <class Prompt, class Decode>
MOE_HD inline void for_each_turn_run(const TurnEnds& turns, uint32_t first_position, int32_t begin,
                                     int32_t end, Prompt&& prompt, Decode&& decode) {
  for (int32_t i = begin; i < end;) {
    const uint32_t position = first_position + static_cast<uint32_t>(i - begin);
    const int segment = turns.segment_of(position);
    const uint64_t segment_end = segment < turns.count ? turns.ends[segment] : ~uint64_t{0};
    const int32_t run_end = segment_end - position < static_cast<uint64_t>(end - i)
                                ? i + static_cast<int32_t>(segment_end - position)
                                : end;
    if (TurnEnds::is_prompt_segment(segment, turns.count)) {
      prompt(i, run_end, position, static_cast<uint32_t>(segment_end));
    } else {
      decode(i, run_end);
    }
    i = run_end;
  }
}

// Why a list of turn ends is not valid (nullptr when it is): the one check of admit, restore and the segment
// parser.
inline const char* turn_ends_error(const uint32_t* ends, int64_t count) {
  if (count < 1) return "no turn ends (a request has at least its prompt: {prompt_length})";
  if (count % 2 == 0)
    return "an even number of turn ends (the list alternates prompt and answer and ends with a prompt)";
  if (ends[0] == 0) return "the first turn's prompt is empty (ends[0] = 0)";
  for (int64_t i = 1; i < count; ++i) {
    if (ends[i] <= ends[i - 1])
      return "turn ends not strictly increasing (every turn's prompt and answer hold >= 1 position)";
  }
  return nullptr;
}

}  // namespace moe::rules
