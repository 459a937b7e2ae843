#include "sim/diverge/serving.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moe::sim::diverge {

void SchedulerConfig::validate() const {
  auto check = [](bool ok, const char* name, int v, const char* rule) {
    if (!ok) {
      throw std::invalid_argument(std::string("SchedulerConfig: ") + name + " (" + std::to_string(v) + ") " +
                                  rule);
    }
  };
  check(token_budget > 0, "token_budget", token_budget, "must be positive");
  check(chunk_size > 0, "chunk_size", chunk_size, "must be positive");
  check(max_running > 0, "max_running", max_running, "must be positive");
}

Scheduler::Scheduler(SchedulerConfig config, std::vector<Request> requests) : config_(config) {
  config_.validate();
  std::stable_sort(requests.begin(), requests.end(), [](const Request& a, const Request& b) {
    return a.arrival_step != b.arrival_step ? a.arrival_step < b.arrival_step : a.id < b.id;
  });
  live_.reserve(requests.size());
  for (auto& r : requests) {
    if (r.prompt.empty())
      throw std::invalid_argument("Scheduler: request " + std::to_string(r.id) + " has an empty prompt");
    if (r.max_new_tokens < 1) {
      throw std::invalid_argument("Scheduler: request " + std::to_string(r.id) + " has max_new_tokens " +
                                  std::to_string(r.max_new_tokens) + " (must be >= 1)");
    }
    if (!index_.emplace(r.id, live_.size()).second) {
      throw std::invalid_argument("Scheduler: duplicate request id " + std::to_string(r.id));
    }
    live_.push_back(Live{std::move(r), 0, {}, false});
  }
}

const std::vector<model::BatchRow>& Scheduler::next_batch() {
  while (next_arrival_ < live_.size() && live_[next_arrival_].request.arrival_step <= step_) {
    waiting_.push_back(next_arrival_++);
  }
  rows_.clear();
  int budget = config_.token_budget;
  auto add_chunk = [&](Live& l) {
    const int prompt_len = static_cast<int>(l.request.prompt.size());
    const int c = std::min({prompt_len - l.prefilled, config_.chunk_size, budget});
    for (int p = l.prefilled; p < l.prefilled + c; ++p) {
      rows_.push_back({l.request.id, static_cast<uint32_t>(p), l.request.prompt[p]});
    }
    l.prefilled += c;
    budget -= c;
  };
  for (size_t idx : running_) {
    if (budget == 0) break;
    Live& l = live_[idx];
    const int prompt_len = static_cast<int>(l.request.prompt.size());
    if (l.prefilled < prompt_len) {
      add_chunk(l);
    } else {
      rows_.push_back(
          {l.request.id, static_cast<uint32_t>(prompt_len + l.generated.size() - 1), l.generated.back()});
      --budget;
    }
  }
  while (budget > 0 && !waiting_.empty() && static_cast<int>(running_.size()) < config_.max_running) {
    const size_t idx = waiting_.front();
    waiting_.pop_front();
    running_.push_back(idx);
    add_chunk(live_[idx]);
  }
  ++step_;
  return rows_;
}

void Scheduler::complete(std::span<const int32_t> logit_rows, std::span<const float> logits, int vocab_size,
                         std::vector<uint64_t>& finished) {
  for (size_t i = 0; i < logit_rows.size(); ++i) {
    const model::BatchRow& row = rows_.at(logit_rows[i]);
    Live& l = live_[index_.at(row.request_id)];
    if (l.prefilled < static_cast<int>(l.request.prompt.size())) continue;  // mid-prompt chunk: no token
    l.generated.push_back(model::Model::argmax(logits.data() + i * vocab_size, vocab_size));
    if (static_cast<int>(l.generated.size()) == l.request.max_new_tokens) {
      l.done = true;
      ++num_done_;
      finished.push_back(l.request.id);
    }
  }
  std::erase_if(running_, [&](size_t idx) { return live_[idx].done; });
}

bool Scheduler::all_finished() const {
  return num_done_ == live_.size();
}

const std::vector<int32_t>& Scheduler::generated(uint64_t id) const {
  auto it = index_.find(id);
  if (it == index_.end()) throw std::invalid_argument("Scheduler: unknown request id " + std::to_string(id));
  return live_[it->second].generated;
}

bool Scheduler::finished(uint64_t id) const {
  auto it = index_.find(id);
  if (it == index_.end()) throw std::invalid_argument("Scheduler: unknown request id " + std::to_string(id));
  return live_[it->second].done;
}

ServeOutcome serve(model::Model& model, std::vector<Request> requests, const SchedulerConfig& config,
                   uint64_t probe_id, int max_steps) {
  if (std::none_of(requests.begin(), requests.end(), [&](const Request& r) { return r.id == probe_id; })) {
    throw std::invalid_argument("serve: the probe id " + std::to_string(probe_id) +
                                " is not among the requests");
  }
  if (model.num_requests() != 0) throw std::invalid_argument("serve: the model already holds live requests");
  // A request is admitted (with its prompt length, as an engine knows it) when its first chunk is scheduled.
  std::unordered_map<uint64_t, uint32_t> prompt_length;
  for (const auto& r : requests) prompt_length[r.id] = static_cast<uint32_t>(r.prompt.size());
  const uint32_t probe_prompt_length = prompt_length.at(probe_id);
  Scheduler scheduler(config, std::move(requests));
  ServeOutcome out;
  model::ForwardStats stats;
  std::vector<int32_t> logit_rows;
  std::vector<float> logits;
  std::vector<uint64_t> finished;
  const int vocab = model.shape().vocab_size;
  const int top_k = model.shape().top_k;
  const int layers = model.shape().num_layers;
  try {
    while (!scheduler.finished(probe_id)) {
      if (scheduler.step() >= max_steps) {
        throw std::invalid_argument("serve: the probe did not finish within " + std::to_string(max_steps) +
                                    " steps");
      }
      const std::vector<model::BatchRow>& rows = scheduler.next_batch();
      ++out.steps;
      if (rows.empty()) continue;
      out.rows += static_cast<int64_t>(rows.size());
      for (const model::BatchRow& row : rows) {
        if (row.position == 0) model.admit(row.request_id, prompt_length.at(row.request_id));
      }
      model.forward(rows, logit_rows, logits, &stats);
      int probe_rows = 0;
      int probe_dropped = 0;
      for (size_t r = 0; r < rows.size(); ++r) {
        if (rows[r].request_id != probe_id) continue;
        ++probe_rows;
        probe_dropped += stats.dropped_pairs[r];
      }
      if (probe_rows > 0) {
        ++out.probe_steps;
        out.probe_chunks.push_back(probe_rows);
        out.probe_pairs += static_cast<int64_t>(probe_rows) * top_k * layers;
        out.probe_pairs_dropped += probe_dropped;
        if (probe_dropped > 0) ++out.probe_steps_with_drop;
      }
      for (size_t i = 0; i < logit_rows.size(); ++i) {
        const model::BatchRow& row = rows[logit_rows[i]];
        if (row.request_id != probe_id || row.position + 1 < probe_prompt_length) continue;
        const auto* bytes = reinterpret_cast<const unsigned char*>(logits.data() + i * vocab);
        for (size_t b = 0; b < sizeof(float) * vocab; ++b) {
          out.probe_logits_hash = (out.probe_logits_hash ^ bytes[b]) * 0x100000001B3ull;
        }
      }
      finished.clear();
      scheduler.complete(logit_rows, logits, vocab, finished);
      for (uint64_t id : finished) model.release(id);
    }
  } catch (...) {
    model.clear();
    throw;
  }
  out.probe_tokens = scheduler.generated(probe_id);
  model.clear();
  return out;
}

}  // namespace moe::sim::diverge
