#include "sim/serving/engine.h"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>

#include "router/rules/turn_rules.h"

namespace moe::sim::serving {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument("serving engine: " + msg);
}

uint64_t blocks_for(uint64_t positions, int block_size) {
  return (positions + static_cast<uint64_t>(block_size) - 1) / static_cast<uint64_t>(block_size);
}

}  // namespace

void EngineConfig::validate() const {
  auto check = [](bool ok, const char* name, int64_t v, const char* rule) {
    if (!ok) fail(std::string(name) + " (" + std::to_string(v) + ") " + rule);
  };
  check(token_budget > 0, "token_budget", token_budget, "must be positive");
  check(chunk_size >= 0, "chunk_size", chunk_size, "must be >= 0 (0: the token budget only)");
  check(max_running > 0, "max_running", max_running, "must be positive");
  check(block_size >= 1, "block_size", block_size, "must be >= 1");
  check(kv_blocks >= 0 && kv_blocks < INT32_MAX, "kv_blocks", kv_blocks,
        "must be in [0, 2^31) (0: unbounded)");
  check(spec_tokens >= 0, "spec_tokens", spec_tokens, "must be >= 0");
  if (prefix_cache && kv_blocks == 0) fail("prefix_cache needs a KV pool: set kv_blocks > 0");
}

Engine::Engine(EngineConfig config, std::vector<EngineRequest> requests, EngineClient& client)
    : config_(config), client_(client), requests_(std::move(requests)) {
  config_.validate();
  // Requests that arrive at a step first, by (arrival_step, id); then the turns that follow another request.
  std::stable_sort(requests_.begin(), requests_.end(), [](const EngineRequest& a, const EngineRequest& b) {
    const bool fa = a.follows != kNoRequest, fb = b.follows != kNoRequest;
    if (fa != fb) return fb;
    return a.arrival_step != b.arrival_step ? a.arrival_step < b.arrival_step : a.id < b.id;
  });
  first_follower_ =
      static_cast<size_t>(std::find_if(requests_.begin(), requests_.end(),
                                       [](const EngineRequest& r) { return r.follows != kNoRequest; }) -
                          requests_.begin());
  std::vector<uint64_t> ids;
  ids.reserve(requests_.size());
  for (const EngineRequest& r : requests_) {
    if (r.prompt_length == 0) fail("request " + std::to_string(r.id) + " has an empty prompt");
    if (r.max_new_tokens == 0)
      fail("request " + std::to_string(r.id) + " has max_new_tokens 0 (must be >= 1)");
    if (config_.kv_blocks > 0) {
      const uint64_t need = blocks_for(uint64_t{r.prompt_length} + r.max_new_tokens, config_.block_size);
      if (need > static_cast<uint64_t>(config_.kv_blocks)) {
        fail("request " + std::to_string(r.id) + " needs " + std::to_string(need) + " KV blocks (" +
             std::to_string(r.prompt_length) + " prompt and " + std::to_string(r.max_new_tokens) +
             " new tokens) but the pool has " + std::to_string(config_.kv_blocks));
      }
    }
    if (!r.turn_ends.empty()) {
      if (const char* error =
              rules::turn_ends_error(r.turn_ends.data(), static_cast<int64_t>(r.turn_ends.size()))) {
        fail("request " + std::to_string(r.id) + ": " + error);
      }
      if (r.turn_ends.back() != r.prompt_length) {
        fail("request " + std::to_string(r.id) + ": its last turn end " + std::to_string(r.turn_ends.back()) +
             " is not its prompt length " + std::to_string(r.prompt_length));
      }
    }
    if (r.think_steps < 0) fail("request " + std::to_string(r.id) + " has a negative think time");
    ids.push_back(r.id);
  }
  std::sort(ids.begin(), ids.end());
  if (auto dup = std::adjacent_find(ids.begin(), ids.end()); dup != ids.end()) {
    fail("duplicate request id " + std::to_string(*dup));
  }
  // The turns that follow others: each names a known request, and no chain of them comes back to itself.
  std::unordered_map<uint64_t, uint64_t> follows;
  for (size_t i = first_follower_; i < requests_.size(); ++i) {
    const EngineRequest& r = requests_[i];
    if (!std::binary_search(ids.begin(), ids.end(), r.follows)) {
      fail("request " + std::to_string(r.id) + " follows request " + std::to_string(r.follows) +
           ", which the engine does not have");
    }
    follows[r.id] = r.follows;
    followers_[r.follows].push_back(i);
  }
  for (const auto& [id, first] : follows) {
    uint64_t at = first;
    for (size_t hops = 0; hops <= follows.size(); ++hops) {
      if (at == id) fail("request " + std::to_string(id) + " follows itself (a cycle of turns)");
      auto it = follows.find(at);
      if (it == follows.end()) break;
      at = it->second;
    }
  }
  if (config_.kv_blocks > 0) pool_.emplace(config_.kv_blocks);
}

RequestStats Engine::request_stats(uint64_t id) const {
  for (size_t slot : waiting_) {
    if (live_[slot].spec->id == id) return live_[slot].stats;
  }
  for (size_t slot : running_) {
    if (live_[slot].spec->id == id) return live_[slot].stats;
  }
  auto it = finished_stats_.find(id);
  if (it == finished_stats_.end()) {
    fail("no stats of request " + std::to_string(id) +
         " (unknown, not arrived yet, or finished without keep_request_stats)");
  }
  return it->second;
}

BlockKey Engine::key_of(const Live& l, uint32_t block, const BlockKey& parent) {
  const uint32_t begin = block * static_cast<uint32_t>(config_.block_size);
  const uint32_t end = begin + static_cast<uint32_t>(config_.block_size);
  scratch_tokens_.clear();
  for (uint32_t p = begin; p < end; ++p) scratch_tokens_.push_back(client_.token(*l.spec, p));
  return block_key(parent, begin, client_.salt(*l.spec, end), scratch_tokens_);
}

void Engine::release_blocks(Live& l) {
  if (pool_) {
    // The tail first: its blocks are the least likely to be shared, so they are evicted first.
    std::reverse(l.blocks.begin(), l.blocks.end());
    pool_->release(l.blocks);
  }
  l.blocks.clear();
  l.keys.clear();
}

void Engine::preempt(size_t running_index, Step& step) {
  const size_t idx = running_[running_index];
  Live& l = live_[idx];
  release_blocks(l);
  l.computed = 0;
  ++l.stats.preemptions;
  ++stats_.preemptions;
  step.preempted.push_back(l.spec->id);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(running_index));
  waiting_.push_front(idx);
}

bool Engine::reserve_blocks(Live& l, uint32_t end, int64_t protect_started, Step& step) {
  const int64_t need =
      static_cast<int64_t>(blocks_for(end, config_.block_size)) - static_cast<int64_t>(l.blocks.size());
  while (!pool_->allocate(need, l.blocks)) {
    // Recompute preemption of the latest-started running request, if it started after this one.
    if (running_.empty() || live_[running_.back()].started <= protect_started) return false;
    preempt(running_.size() - 1, step);
  }
  return true;
}

void Engine::take_arrivals() {
  if (waiting_.empty() && running_.empty()) {  // nothing to run: skip the idle steps
    int64_t next = INT64_MAX;
    if (next_arrival_ < first_follower_) next = requests_[next_arrival_].arrival_step;
    if (!due_.empty()) next = std::min(next, std::get<0>(due_.front()));
    if (next != INT64_MAX) now_ = std::max(now_, next);
  }
  while (true) {
    size_t index;
    const bool scheduled = next_arrival_ < first_follower_ && requests_[next_arrival_].arrival_step <= now_;
    const bool followed = !due_.empty() && std::get<0>(due_.front()) <= now_;
    if (scheduled &&
        (!followed || std::make_pair(requests_[next_arrival_].arrival_step, requests_[next_arrival_].id) <
                          std::make_pair(std::get<0>(due_.front()), std::get<1>(due_.front())))) {
      index = next_arrival_++;
    } else if (followed) {
      index = std::get<2>(due_.front());
      std::pop_heap(due_.begin(), due_.end(), std::greater<>());  // due_ is a min-heap
      due_.pop_back();
    } else {
      break;
    }
    const EngineRequest& r = requests_[index];
    size_t slot;
    if (free_slots_.empty()) {
      slot = live_.size();
      live_.emplace_back();
    } else {
      slot = free_slots_.back();
      free_slots_.pop_back();
    }
    Live& l = live_[slot];
    l = Live{};
    l.spec = &r;
    l.known = r.prompt_length;
    l.stats.prompt_length = r.prompt_length;
    waiting_.push_back(slot);
  }
}

void Engine::add_span(Step& step, size_t slot, uint32_t rows, int drafts, int& budget) {
  Live& l = live_[slot];
  Span s;
  s.id = l.spec->id;
  s.begin = l.computed;
  s.end = l.computed + rows;
  s.row = static_cast<int32_t>(step.rows.size());
  s.drafts = drafts;
  s.samples = s.end >= l.known;
  s.client_index = l.spec->client_index;
  const size_t at = step.rows.size();
  step.rows.resize(at + rows);
  TokenMeta* out = step.rows.data() + at;
  for (uint32_t q = 0; q < rows; ++q) out[q] = TokenMeta{s.id, s.begin + q};
  step.spans.push_back(s);
  pending_.push_back(Pending{slot, s.begin, s.end, drafts});
  budget -= static_cast<int>(rows);
  l.stats.computed_rows += rows;
}

// Running requests, in start order: the next prompt chunk (or recompute chunk), or a decode row with its
// draft tokens. One whose blocks cannot be reserved even by preempting later-started ones is preempted itself
// (it yields its own blocks); the request after it then takes its place in running_.
void Engine::continue_running(Step& step, int& budget) {
  size_t i = 0;
  while (i < running_.size() && budget > 0) {
    const size_t slot = running_[i];
    Live& l = live_[slot];
    const uint32_t L = l.spec->prompt_length;
    const uint32_t remaining = l.known - l.computed;
    uint32_t n;
    int drafts = 0;
    if (remaining == 1 && l.known > L) {                                    // decoding
      const int64_t still = int64_t{L} + l.spec->max_new_tokens - l.known;  // tokens still to generate
      const int max = static_cast<int>(std::min<int64_t>({config_.spec_tokens, budget - 1, still - 1}));
      if (max > 0) drafts = std::clamp(client_.propose(*l.spec, l.known, max), 0, max);
      n = 1 + static_cast<uint32_t>(drafts);
    } else {
      n = remaining;
      if (config_.chunk_size > 0) n = std::min<uint32_t>(n, static_cast<uint32_t>(config_.chunk_size));
      n = std::min<uint32_t>(n, static_cast<uint32_t>(budget));
    }
    if (pool_ && !reserve_blocks(l, l.computed + n, l.started, step)) {
      preempt(i, step);
      continue;
    }
    add_span(step, slot, n, drafts, budget);
    ++i;
  }
}

uint32_t Engine::match_cached_prefix(Live& l, Admission& a) {
  std::vector<BlockKey>& keys = scratch_keys_;
  keys.clear();
  if (!config_.prefix_cache) return 0;
  // Full blocks of the known tokens but the last (one position is always computed: it gives the logits).
  const uint32_t bs = static_cast<uint32_t>(config_.block_size);
  const uint32_t full = (l.known - 1) / bs;
  for (uint32_t b = 0; b < full; ++b) keys.push_back(key_of(l, b, b == 0 ? BlockKey{} : keys.back()));
  const int m = pool_->match(keys, a.blocks);
  keys.resize(static_cast<size_t>(m));
  a.keys = keys;
  return static_cast<uint32_t>(m) * bs;
}

// Waiting requests (preempted ones first, then arrivals in order) start while the budget and max_running
// allow: the cached prefix, then a first chunk. One that finds no room for its blocks waits, and so does
// everyone behind it (an admission never preempts).
void Engine::start_waiting(Step& step, int& budget) {
  while (budget > 0 && static_cast<int>(running_.size()) < config_.max_running && !waiting_.empty()) {
    const size_t slot = waiting_.front();
    Live& l = live_[slot];
    Admission a;
    a.id = l.spec->id;
    a.prompt_length = l.spec->prompt_length;
    a.turn_ends = l.spec->turn_ends;
    a.resumed = l.admitted_once;
    a.cached = match_cached_prefix(l, a);
    uint32_t n = l.known - a.cached;
    if (config_.chunk_size > 0) n = std::min<uint32_t>(n, static_cast<uint32_t>(config_.chunk_size));
    n = std::min<uint32_t>(n, static_cast<uint32_t>(budget));
    std::vector<int32_t> blocks = a.blocks;
    if (pool_) {
      const int64_t need = static_cast<int64_t>(blocks_for(a.cached + n, config_.block_size)) -
                           static_cast<int64_t>(blocks.size());
      if (!pool_->allocate(need, blocks)) {
        pool_->release(a.blocks);  // no room: it waits
        break;
      }
    }
    waiting_.pop_front();
    l.blocks = std::move(blocks);
    l.keys = scratch_keys_;
    l.computed = a.cached;
    l.started = starts_++;
    running_.push_back(slot);
    if (!l.admitted_once) {
      stats_.prompt_tokens += a.prompt_length;
      stats_.cached_prompt_tokens += a.cached;
      l.stats.cached_at_admission = a.cached;
      l.admitted_once = true;
    }
    stats_.cached_tokens += a.cached;
    l.stats.cached_tokens += a.cached;
    add_span(step, slot, n, 0, budget);
    step.admitted.push_back(std::move(a));
  }
}

bool Engine::next(Step& step) {
  if (pending_complete_) throw std::logic_error("serving engine: next() before the last step was completed");
  if (all_finished()) return false;
  take_arrivals();
  step.index = now_;
  for (auto* v : {&step.preempted, &step.finished}) v->clear();
  step.admitted.clear();
  step.spans.clear();
  step.rows.clear();
  step.accepted.clear();
  step.rollbacks.clear();
  step.registered.clear();
  pending_.clear();
  int budget = config_.token_budget;
  continue_running(step, budget);
  start_waiting(step, budget);
  if (pool_)
    stats_.peak_blocks_used = std::max(stats_.peak_blocks_used, pool_->num_blocks() - pool_->available());
  ++stats_.steps;
  stats_.rows += static_cast<int64_t>(step.rows.size());
  ++now_;
  pending_complete_ = true;
  return true;
}

void Engine::complete_span(const Pending& span, uint32_t accepted, Step& step) {
  Live& l = live_[span.slot];
  const uint64_t id = l.spec->id;
  const uint32_t end = span.begin + accepted;
  if (end < span.end) step.rollbacks.push_back(TokenMeta{id, end});
  if (span.drafts > 0) {
    l.stats.drafted += span.drafts;
    l.stats.accepted += accepted - 1;
    stats_.drafted += span.drafts;
    stats_.accepted += accepted - 1;
  }
  l.computed = end;
  if (end >= l.known) l.known = end + 1;  // the accepted drafts, and the token the last row sampled
  if (config_.prefix_cache) {
    const uint32_t bs = static_cast<uint32_t>(config_.block_size);
    while ((l.keys.size() + 1) * bs <= l.computed) {
      const uint32_t b = static_cast<uint32_t>(l.keys.size());
      const BlockKey key = key_of(l, b, b == 0 ? BlockKey{} : l.keys.back());
      l.keys.push_back(key);
      if (pool_->register_block(l.blocks[b], key)) {
        step.registered.push_back(Registered{l.blocks[b], id, b * bs, (b + 1) * bs, key});
      }
    }
  }
  if (l.known - l.spec->prompt_length >= l.spec->max_new_tokens) {
    release_blocks(l);
    l.stats.finished = true;
    ++finished_;
    step.finished.push_back(id);
    if (config_.keep_request_stats) finished_stats_[id] = l.stats;
    // The turns that follow it arrive after their think time (now_ is the next step's index).
    if (auto it = followers_.find(id); it != followers_.end()) {
      for (size_t index : it->second) {
        due_.emplace_back(now_ + requests_[index].think_steps, requests_[index].id, index);
        std::push_heap(due_.begin(), due_.end(), std::greater<>());
      }
    }
    free_slots_.push_back(span.slot);
  }
}

void Engine::complete(Step& step) {
  if (!pending_complete_) throw std::logic_error("serving engine: complete() without a step to complete");
  const std::vector<uint32_t>& accepted = step.accepted;
  if (accepted.size() != pending_.size()) {
    fail("complete: " + std::to_string(accepted.size()) + " accepted counts for " +
         std::to_string(pending_.size()) + " spans");
  }
  for (size_t i = 0; i < pending_.size(); ++i) {
    const Pending& s = pending_[i];
    const uint32_t n = s.end - s.begin;
    if (accepted[i] < 1 || accepted[i] > n || (s.drafts == 0 && accepted[i] != n)) {
      fail("complete: span " + std::to_string(i) + " of request " + std::to_string(live_[s.slot].spec->id) +
           " accepts " + std::to_string(accepted[i]) + " of its " + std::to_string(n) + " rows (" +
           std::to_string(s.drafts) + " drafts)");
    }
  }
  step.rollbacks.clear();
  step.registered.clear();
  step.finished.clear();
  for (size_t i = 0; i < pending_.size(); ++i) complete_span(pending_[i], accepted[i], step);
  // One pass for the step's finished requests (their slots are reused only by the next step's arrivals).
  if (!step.finished.empty()) std::erase_if(running_, [&](size_t idx) { return live_[idx].stats.finished; });
  if (pool_) stats_.evictions = pool_->evictions();
  pending_complete_ = false;
}

}  // namespace moe::sim::serving
