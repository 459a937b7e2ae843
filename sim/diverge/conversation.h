// Conversations in the lab's traffic (docs/divergence.md, "Multi-turn trials"; the routing rule: docs/
// routing.md, "Conversations (multi-turn chat)"). A conversation is a chain of Requests: turn 1 is a plain
// request; each later turn follows the previous one (Request::follows) and its Request::prompt holds only its
// new message. Its whole prompt is the previous turn's whole prompt, the previous turn's answer (every token
// it generated: max_new_tokens of them, the last one never fed back in that turn) and the message; the server
// fills it in when the previous turn finishes (the answer is known only then), so the lengths - and hence the
// turn ends {P1, A1, ..., L} - are known up front: A = previous L + previous max_new_tokens, L = A + message.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/diverge/serving.h"

namespace moe::sim::diverge {

// Each request's whole prompt length (a follower's: its previous turn's L + max_new_tokens + its message).
// Throws std::invalid_argument naming the request when its previous turn is absent or comes later in
// `requests`, or when it has an empty message.
std::vector<uint32_t> prompt_lengths(std::span<const Request> requests);

// Each request's turn ends: empty for a single-turn request and for a follower admitted as a plain prompt
// (Request::as_plain_prompt); else the previous turn's turn ends (its {L} for a single turn), then A and L.
// Throws as prompt_lengths().
std::vector<std::vector<uint32_t>> turn_ends_of(std::span<const Request> requests);

// The answer lengths of a probe of `turns` turns that generates gen_length tokens in all: gen_length split as
// evenly as possible, the earlier turns taking the remainder. Throws std::invalid_argument for turns < 1 or
// gen_length < turns (every turn answers at least one token).
std::vector<int> split_answers(int gen_length, int turns);

// The turns after `first` (its id, sampling and answer as given): turn k + 2 (k = 0, 1, ...) gets id
// first_id + k, the prompt messages[k] (its new message), max_new_tokens answers[k], think_steps think[k],
// follows the turn before it and samples like `first`. Throws std::invalid_argument when the three lists
// differ in length, or for an empty message, an answer < 1 or a negative think time.
std::vector<Request> follow_up_turns(const Request& first, std::span<const std::vector<int32_t>> messages,
                                     std::span<const int> answers, std::span<const int> think,
                                     uint64_t first_id);

}  // namespace moe::sim::diverge
