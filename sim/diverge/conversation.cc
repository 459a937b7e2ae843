#include "sim/diverge/conversation.h"

#include <stdexcept>
#include <string>
#include <unordered_map>

namespace moe::sim::diverge {
namespace {

// Each request's index in `requests` by id, and the index of each one's previous turn (-1: none).
std::vector<int64_t> previous_turns(std::span<const Request> requests) {
  std::unordered_map<uint64_t, size_t> seen;
  std::vector<int64_t> previous(requests.size(), -1);
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    if (r.follows != serving::kNoRequest) {
      const auto it = seen.find(r.follows);
      if (it == seen.end()) {
        throw std::invalid_argument("conversation: request " + std::to_string(r.id) + " follows request " +
                                    std::to_string(r.follows) +
                                    ", which is not among the requests before it");
      }
      if (r.prompt.empty()) {
        throw std::invalid_argument("conversation: request " + std::to_string(r.id) +
                                    " (a later turn) has an empty message");
      }
      previous[i] = static_cast<int64_t>(it->second);
    }
    seen.emplace(r.id, i);
  }
  return previous;
}

}  // namespace

std::vector<uint32_t> prompt_lengths(std::span<const Request> requests) {
  const std::vector<int64_t> previous = previous_turns(requests);
  std::vector<uint32_t> lengths(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const uint32_t before = previous[i] < 0 ? 0
                                            : lengths[static_cast<size_t>(previous[i])] +
                                                  static_cast<uint32_t>(requests[previous[i]].max_new_tokens);
    lengths[i] = before + static_cast<uint32_t>(requests[i].prompt.size());
  }
  return lengths;
}

std::vector<std::vector<uint32_t>> turn_ends_of(std::span<const Request> requests) {
  const std::vector<int64_t> previous = previous_turns(requests);
  const std::vector<uint32_t> lengths = prompt_lengths(requests);
  // The turn ends each request routes by in full ({L} for a single turn), and what it is admitted with.
  std::vector<std::vector<uint32_t>> full(requests.size()), out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    if (previous[i] < 0) {
      full[i] = {lengths[i]};
      continue;
    }
    const size_t p = static_cast<size_t>(previous[i]);
    full[i] = full[p];
    full[i].push_back(lengths[p] + static_cast<uint32_t>(requests[p].max_new_tokens));
    full[i].push_back(lengths[i]);
    if (!requests[i].as_plain_prompt) out[i] = full[i];
  }
  return out;
}

std::vector<int> split_answers(int gen_length, int turns) {
  if (turns < 1 || gen_length < turns) {
    throw std::invalid_argument("conversation: " + std::to_string(gen_length) +
                                " generated tokens cannot be split over " + std::to_string(turns) +
                                " turns (every turn answers at least one token)");
  }
  std::vector<int> answers(static_cast<size_t>(turns), gen_length / turns);
  for (int k = 0; k < gen_length % turns; ++k) ++answers[static_cast<size_t>(k)];
  return answers;
}

std::vector<Request> follow_up_turns(const Request& first, std::span<const std::vector<int32_t>> messages,
                                     std::span<const int> answers, std::span<const int> think,
                                     uint64_t first_id) {
  if (messages.size() != answers.size() || messages.size() != think.size()) {
    throw std::invalid_argument("conversation: " + std::to_string(messages.size()) + " messages, " +
                                std::to_string(answers.size()) + " answers and " +
                                std::to_string(think.size()) + " think times (one each per later turn)");
  }
  std::vector<Request> turns;
  uint64_t previous = first.id;
  for (size_t k = 0; k < messages.size(); ++k) {
    if (messages[k].empty() || answers[k] < 1 || think[k] < 0) {
      throw std::invalid_argument("conversation: turn " + std::to_string(k + 2) + " has a message of " +
                                  std::to_string(messages[k].size()) + " tokens, an answer of " +
                                  std::to_string(answers[k]) + " and a think time of " +
                                  std::to_string(think[k]) + " (need >= 1, >= 1, >= 0)");
    }
    Request r;
    r.id = first_id + k;
    r.arrival_step = first.arrival_step;
    r.prompt = messages[k];
    r.max_new_tokens = answers[k];
    r.sampling = first.sampling;
    r.follows = previous;
    r.think_steps = think[k];
    previous = r.id;
    turns.push_back(std::move(r));
  }
  return turns;
}

}  // namespace moe::sim::diverge
