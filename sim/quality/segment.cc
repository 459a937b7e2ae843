#include "sim/quality/segment.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "sim/serving/lifecycle.h"

namespace moe::sim::quality {
namespace {

// The engine's client: every request's tokens (a stranger's prompt, then what it generated; a scored
// window's prompt). No drafts, no cache key.
class Client : public serving::EngineClient {
 public:
  explicit Client(const std::vector<diverge::Request>& requests) : tokens_(requests.size()) {
    for (size_t i = 0; i < requests.size(); ++i) tokens_[i] = requests[i].prompt;
  }
  uint64_t token(const serving::EngineRequest& r, uint32_t position) override {
    return static_cast<uint64_t>(tokens_[r.client_index].at(position));
  }
  int propose(const serving::EngineRequest&, uint32_t, int) override { return 0; }
  uint64_t salt(const serving::EngineRequest&, uint32_t) override { return 0; }
  std::vector<int32_t>& tokens(size_t index) { return tokens_[index]; }

 private:
  std::vector<std::vector<int32_t>> tokens_;
};

}  // namespace

void ServeCounts::add(const ServeCounts& o) {
  steps += o.steps;
  rows += o.rows;
  text_rows += o.text_rows;
  pairs += o.pairs;
  kept += o.kept;
  rerouted += o.rerouted;
  dropped += o.dropped;
  text_pairs += o.text_pairs;
  text_dropped += o.text_dropped;
  slots += o.slots;
  peak += o.peak;
  step_layers += o.step_layers;
}

Segment make_segment(std::span<const int32_t> stream, std::span<const Window> windows,
                     const Arrivals& arrivals, const diverge::TrafficConfig& traffic,
                     const diverge::PromptSource& strangers, uint64_t seed) {
  if (windows.empty()) throw std::invalid_argument("make_segment: no windows");
  if (arrivals.first_step < 0 || arrivals.interval < 0) {
    throw std::invalid_argument("make_segment: arrival steps must be >= 0");
  }
  const int horizon = arrivals.first_step + static_cast<int>(windows.size()) * arrivals.interval;
  std::vector<diverge::Request> others;
  if (traffic.arrival_rate > 0.0 || traffic.fixed_interval > 0) {
    diverge::TrafficConfig t = traffic;
    t.horizon_steps = horizon;
    t.probe_arrival_step = 0;  // make_traffic always places a probe: a placeholder, removed below
    t.twin_tokens = 0;
    t.twin_lead = 0;
    diverge::Request placeholder;
    placeholder.prompt = {0};
    uint64_t placeholder_id = 0;
    others = diverge::make_traffic(t, strangers, seed, placeholder, &placeholder_id);
    std::erase_if(others, [&](const diverge::Request& r) { return r.id == placeholder_id; });
  }
  Segment s;
  s.windows.assign(windows.begin(), windows.end());
  size_t next_stranger = 0;
  auto add = [&](diverge::Request r, int32_t window) {
    r.id = s.requests.size() + 1;
    s.requests.push_back(std::move(r));
    s.window_of.push_back(window);
  };
  for (size_t j = 0; j < windows.size(); ++j) {
    const int step = arrivals.first_step + static_cast<int>(j) * arrivals.interval;
    while (next_stranger < others.size() && others[next_stranger].arrival_step <= step) {
      add(std::move(others[next_stranger++]), -1);
    }
    diverge::Request r;
    r.arrival_step = step;
    const Window& w = windows[j];
    r.prompt.assign(stream.begin() + w.start, stream.begin() + w.start + w.length);
    r.max_new_tokens = 1;
    add(std::move(r), static_cast<int32_t>(j));
    s.first_token.push_back(s.num_tokens);
    s.num_tokens += w.length;
  }
  while (next_stranger < others.size()) add(std::move(others[next_stranger++]), -1);
  return s;
}

namespace {

// The quality run's side of each step (sim/serving/lifecycle.h): the model's request lifecycle, the forward
// pass with every logits row of a scored window handed to the sink, greedy decoding of the strangers, and
// the counts.
class SegmentHandler : public serving::StepHandler {
 public:
  SegmentHandler(model::Model& model, Client& client, const Segment& segment, const RowSink& sink,
                 ServeCounts& c)
      : model_(model),
        client_(client),
        segment_(segment),
        sink_(sink),
        c_(c),
        vocab_(model.shape().vocab_size),
        layers_(model.shape().num_layers),
        top_k_(model.shape().top_k) {}

  void release(uint64_t id) override { model_.release(id); }
  void admit(const serving::Admission& a) override { model_.admit(a.id, a.turns()); }
  void forward(const serving::Step& step) override {
    rows_.clear();
    bool scored = false;
    for (const serving::Span& s : step.spans) {
      const std::vector<int32_t>& tokens = client_.tokens(s.client_index);
      for (uint32_t q = s.begin; q < s.end; ++q) rows_.push_back(model::BatchRow{s.id, q, tokens.at(q)});
      scored |= segment_.window_of[s.client_index] >= 0;
    }
    model_.forward(rows_, logit_rows_, logits_, &stats_,
                   scored ? model::LogitRows::kEvery : model::LogitRows::kLastPerRequest);
    logit_index_.assign(rows_.size(), -1);
    for (size_t i = 0; i < logit_rows_.size(); ++i) logit_index_[logit_rows_[i]] = static_cast<int32_t>(i);
    count_step();
    for (const serving::Span& s : step.spans) {
      const int32_t window = segment_.window_of[s.client_index];
      if (window < 0) continue;
      const int64_t first = segment_.first_token[static_cast<size_t>(window)];
      for (uint32_t q = s.begin; q < s.end; ++q) {
        const int32_t at = logit_index_[static_cast<size_t>(s.row) + (q - s.begin)];
        sink_(first + q, logits_.data() + static_cast<size_t>(at) * vocab_);
        c_.text_dropped += stats_.dropped_pairs[static_cast<size_t>(s.row) + (q - s.begin)];
      }
      c_.text_rows += s.end - s.begin;
      c_.text_pairs += static_cast<int64_t>(s.end - s.begin) * top_k_ * layers_;
    }
  }
  // Every row is accepted (no drafts); a stranger's sampling span takes its greedy next token.
  void accept(const serving::Step& step, std::vector<uint32_t>& accepted) override {
    for (const serving::Span& s : step.spans) {
      if (segment_.window_of[s.client_index] < 0 && s.samples) {
        const int32_t at = logit_index_.at(static_cast<size_t>(s.row) + (s.end - s.begin - 1));
        client_.tokens(s.client_index)
            .push_back(model::Model::argmax(logits_.data() + static_cast<size_t>(at) * vocab_, vocab_));
      }
      accepted.push_back(s.end - s.begin);
    }
  }

 private:
  void count_step() {
    ++c_.steps;
    c_.rows += static_cast<int64_t>(rows_.size());
    for (int l = 0; l < layers_; ++l) {
      const MoEStats& m = stats_.layers[l];
      c_.kept += m.num_kept;
      c_.rerouted += m.num_rerouted;
      c_.dropped += m.num_dropped;
      for (int64_t cap : model_.moe_layer(l).last_plan().expert_capacity)
        c_.slots += std::max<int64_t>(cap, 0);
      c_.peak += static_cast<int64_t>(m.expert_load.size()) *
                 *std::max_element(m.expert_load.begin(), m.expert_load.end());
    }
    c_.pairs += static_cast<int64_t>(rows_.size()) * top_k_ * layers_;
    c_.step_layers += layers_;
  }

  model::Model& model_;
  Client& client_;
  const Segment& segment_;
  const RowSink& sink_;
  ServeCounts& c_;
  const int vocab_, layers_, top_k_;
  model::ForwardStats stats_;
  std::vector<model::BatchRow> rows_;
  std::vector<int32_t> logit_rows_;
  std::vector<float> logits_;
  std::vector<int32_t> logit_index_;  // per row: its logits' index (-1: none)
};

}  // namespace

ServeCounts serve_segment(model::Model& model, const Segment& segment, const serving::EngineConfig& engine,
                          const RowSink& sink) {
  if (engine.prefix_cache || engine.spec_tokens > 0) {
    throw std::invalid_argument(
        "serve_segment: no prefix cache or speculation (every policy must see the same steps)");
  }
  if (model.num_requests() != 0)
    throw std::invalid_argument("serve_segment: the model already holds requests");
  Client client(segment.requests);
  serving::Engine server(engine, diverge::engine_requests(segment.requests), client);
  size_t scored_left = segment.windows.size();
  ServeCounts c;
  SegmentHandler handler(model, client, segment, sink, c);
  serving::Step step;
  try {
    while (scored_left > 0) {
      if (!serving::run_step(server, step, handler)) {
        throw std::logic_error("serve_segment: the engine finished before the scored windows");
      }
      for (uint64_t id : step.finished) {
        if (segment.window_of[id - 1] >= 0) --scored_left;
      }
    }
  } catch (...) {
    model.clear();
    throw;
  }
  model.clear();
  return c;
}

}  // namespace moe::sim::quality
