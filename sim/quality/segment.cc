#include "sim/quality/segment.h"

#include <algorithm>
#include <stdexcept>
#include <string>

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
  uint64_t salt(uint32_t, uint32_t) override { return 0; }
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
  const int vocab = model.shape().vocab_size;
  const int layers = model.shape().num_layers;
  const int top_k = model.shape().top_k;
  size_t scored_left = segment.windows.size();

  ServeCounts c;
  serving::StepPlan plan;
  serving::StepResult result;
  model::ForwardStats stats;
  std::vector<model::BatchRow> rows;
  std::vector<int32_t> logit_rows;
  std::vector<float> logits;
  std::vector<int32_t> logit_index;  // per row: its logits' index (-1: none)
  std::vector<uint32_t> accepted;
  try {
    while (scored_left > 0) {
      if (!server.next(plan))
        throw std::logic_error("serve_segment: the engine finished before the scored windows");
      for (const serving::Admission& a : plan.admitted) model.admit(a.id, a.prompt_length);
      rows.clear();
      bool scored = false;
      for (const serving::Span& s : plan.spans) {
        const std::vector<int32_t>& tokens = client.tokens(s.client_index);
        for (uint32_t q = s.begin; q < s.end; ++q) rows.push_back(model::BatchRow{s.id, q, tokens.at(q)});
        scored |= segment.window_of[s.client_index] >= 0;
      }
      model.forward(rows, logit_rows, logits, &stats,
                    scored ? model::LogitRows::kEvery : model::LogitRows::kLastPerRequest);
      logit_index.assign(rows.size(), -1);
      for (size_t i = 0; i < logit_rows.size(); ++i) logit_index[logit_rows[i]] = static_cast<int32_t>(i);
      ++c.steps;
      c.rows += static_cast<int64_t>(rows.size());
      for (int l = 0; l < layers; ++l) {
        const MoEStats& m = stats.layers[l];
        c.kept += m.num_kept;
        c.rerouted += m.num_rerouted;
        c.dropped += m.num_dropped;
        for (int64_t cap : model.moe_layer(l).last_plan().expert_capacity)
          c.slots += std::max<int64_t>(cap, 0);
        c.peak += static_cast<int64_t>(m.expert_load.size()) *
                  *std::max_element(m.expert_load.begin(), m.expert_load.end());
      }
      c.pairs += static_cast<int64_t>(rows.size()) * top_k * layers;
      c.step_layers += layers;
      accepted.clear();
      for (const serving::Span& s : plan.spans) {
        const int32_t window = segment.window_of[s.client_index];
        if (window >= 0) {
          const int64_t first = segment.first_token[static_cast<size_t>(window)];
          for (uint32_t q = s.begin; q < s.end; ++q) {
            const int32_t at = logit_index[static_cast<size_t>(s.row) + (q - s.begin)];
            sink(first + q, logits.data() + static_cast<size_t>(at) * vocab);
            c.text_dropped += stats.dropped_pairs[static_cast<size_t>(s.row) + (q - s.begin)];
          }
          c.text_rows += s.end - s.begin;
          c.text_pairs += static_cast<int64_t>(s.end - s.begin) * top_k * layers;
        } else if (s.samples) {
          const int32_t at = logit_index.at(static_cast<size_t>(s.row) + (s.end - s.begin - 1));
          client.tokens(s.client_index)
              .push_back(model::Model::argmax(logits.data() + static_cast<size_t>(at) * vocab, vocab));
        }
        accepted.push_back(s.end - s.begin);
      }
      server.complete(accepted, result);
      for (uint64_t id : result.finished) {
        model.release(id);
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
