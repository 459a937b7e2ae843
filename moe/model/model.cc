#include "moe/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "kernels/cpu/linear.h"
#include "moe/model/ops.h"
#include "router/rules/capacity.h"

namespace moe::model {
namespace {

kernels::MatrixView view(const std::vector<float>& w, int64_t rows, int64_t cols) {
  kernels::MatrixView m;
  m.data = w.data();
  m.dtype = kernels::DType::kF32;
  m.rows = rows;
  m.cols = cols;
  m.row_stride = cols;
  return m;
}

}  // namespace

Model::Model(std::shared_ptr<const ModelWeights> weights, ModelOptions options)
    : weights_(std::move(weights)), options_(std::move(options)), pool_(1) {
  if (!weights_) throw std::invalid_argument("Model: weights are null");
  weights_->validate();
  options_.validate();
  const ModelShape& s = weights_->shape;
  const MoELayerConfig layer_config = options_.layer_config(s);
  for (int l = 0; l < s.num_layers; ++l) {
    layers_.push_back(std::make_unique<MoELayer>(layer_config, weights_->layers[l].moe));
    routing_.emplace_back(s.num_experts, s.top_k, options_.record_routing);
  }
}

Model::~Model() = default;

void Model::admit(uint64_t request_id, uint32_t prompt_length) {
  if (prompt_length == 0) {
    throw std::invalid_argument("Model::admit: request " + std::to_string(request_id) +
                                ": prompt_length must be >= 1");
  }
  admit(request_id, std::span<const uint32_t>(&prompt_length, 1));
}

void Model::admit(uint64_t request_id, std::span<const uint32_t> turn_ends) {
  if (is_live(request_id)) {
    throw std::invalid_argument("Model::admit: request " + std::to_string(request_id) +
                                " is already live (release it first)");
  }
  for (auto& state : routing_)
    state.admit(request_id, turn_ends);  // the first refuses bad ends, changing nothing
  caches_.try_emplace(request_id);
}

Model::CachedBlock Model::cached_block(uint64_t request_id, uint32_t begin, uint32_t end) const {
  const std::string who = "Model::cached_block: request " + std::to_string(request_id);
  auto it = caches_.find(request_id);
  if (it == caches_.end()) throw std::invalid_argument(who + " is not live");
  const RequestCache& c = it->second;
  if (begin > end || end > c.length) {
    throw std::invalid_argument(who + ": [" + std::to_string(begin) + ", " + std::to_string(end) +
                                ") is not within its cache [0, " + std::to_string(c.length) + ")");
  }
  const int64_t d = weights_->shape.hidden;
  CachedBlock b;
  b.begin = begin;
  b.end = end;
  for (size_t l = 0; l < layers_.size(); ++l) {
    b.keys.emplace_back(c.keys[l].begin() + begin * d, c.keys[l].begin() + end * d);
    b.values.emplace_back(c.values[l].begin() + begin * d, c.values[l].begin() + end * d);
    if (rules::carries_routing_state(options_.policy))
      b.routing.push_back(routing_[l].segment(request_id, begin, end));
  }
  return b;
}

void Model::admit_cached(uint64_t request_id, uint32_t prompt_length,
                         std::span<const CachedBlock* const> blocks, bool ignore_salt) {
  if (prompt_length == 0) {
    throw std::invalid_argument("Model::admit_cached: request " + std::to_string(request_id) +
                                ": prompt_length must be >= 1");
  }
  admit_cached(request_id, std::span<const uint32_t>(&prompt_length, 1), blocks, ignore_salt);
}

void Model::admit_cached(uint64_t request_id, std::span<const uint32_t> turn_ends,
                         std::span<const CachedBlock* const> blocks, bool ignore_salt) {
  const std::string who = "Model::admit_cached: request " + std::to_string(request_id);
  if (blocks.empty()) {
    admit(request_id, turn_ends);
    return;
  }
  if (is_live(request_id)) throw std::invalid_argument(who + " is already live (release it first)");
  const ModelShape& s = weights_->shape;
  const size_t d = static_cast<size_t>(s.hidden);
  uint32_t expected = 0;
  for (const CachedBlock* b : blocks) {
    if (b == nullptr || b->begin != expected || b->end < b->begin) {
      throw std::invalid_argument(who + ": the cached blocks do not tile [0, P) (expected one beginning at " +
                                  std::to_string(expected) + ")");
    }
    const size_t rows = b->end - b->begin;
    if (b->keys.size() != layers_.size() || b->values.size() != layers_.size()) {
      throw std::invalid_argument(who + ": a cached block holds " + std::to_string(b->keys.size()) +
                                  " layers, the model " + std::to_string(layers_.size()));
    }
    for (size_t l = 0; l < layers_.size(); ++l) {
      if (b->keys[l].size() != rows * d || b->values[l].size() != rows * d) {
        throw std::invalid_argument(who + ": a cached block's keys or values have the wrong size");
      }
    }
    expected = b->end;
  }
  // Every layer's routing is checked before any changes.
  const bool stateful = rules::carries_routing_state(options_.policy);
  std::vector<std::vector<RoutingSegment>> prefix(layers_.size());
  for (size_t l = 0; l < layers_.size() && stateful; ++l) {
    for (const CachedBlock* b : blocks) {
      if (b->routing.size() != layers_.size()) {
        throw std::invalid_argument(who +
                                    ": a cached block holds no routing segments (the writer did not "
                                    "record routing)");
      }
      const RoutingSegment& seg = b->routing[l];
      if (seg.begin != b->begin || seg.end != b->end) {
        throw std::invalid_argument(
            who + ": a cached block holds the KV of positions [" + std::to_string(b->begin) + ", " +
            std::to_string(b->end) + ") but layer " + std::to_string(l) + "'s routing segment of [" +
            std::to_string(seg.begin) + ", " + std::to_string(seg.end) + ") (not one block's computation)");
      }
      prefix[l].push_back(seg);
      if (ignore_salt) {  // the segment taken as planned for this request
        prefix[l].back().prompt_length = turn_ends.empty() ? 0 : turn_ends.back();  // empty: refused below
        prefix[l].back().turn_ends.assign(turn_ends.begin(), turn_ends.end());
        if (turn_ends.size() == 1) prefix[l].back().turn_ends.clear();
      }
    }
    routing_[l].check_restore(request_id, turn_ends, prefix[l]);
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (stateful) {
      routing_[l].restore(request_id, turn_ends, prefix[l]);
    } else {
      routing_[l].admit(request_id, turn_ends);
    }
  }
  RequestCache& c = caches_[request_id];
  c.keys.resize(s.num_layers);
  c.values.resize(s.num_layers);
  for (size_t l = 0; l < layers_.size(); ++l) {
    for (const CachedBlock* b : blocks) {
      c.keys[l].insert(c.keys[l].end(), b->keys[l].begin(), b->keys[l].end());
      c.values[l].insert(c.values[l].end(), b->values[l].begin(), b->values[l].end());
    }
  }
  c.length = expected;
}

void Model::rollback(uint64_t request_id, uint32_t position) {
  const std::string who = "Model::rollback: request " + std::to_string(request_id);
  auto it = caches_.find(request_id);
  if (it == caches_.end()) throw std::invalid_argument(who + " is not live");
  RequestCache& c = it->second;
  if (position > c.length) {
    throw std::invalid_argument(who + " cannot be rolled forward to position " + std::to_string(position) +
                                " (its cache holds " + std::to_string(c.length) + ")");
  }
  // Only the scopes that carry a routing state advance it (the others admit requests into it and leave them).
  const bool stateful = rules::carries_routing_state(options_.policy);
  for (const RoutingState& state : routing_) {
    if (stateful && state.find(request_id) != nullptr) state.check_rollback(request_id, position);
  }
  for (RoutingState& state : routing_) {
    if (stateful && state.find(request_id) != nullptr) state.rollback(request_id, position);
  }
  const size_t d = static_cast<size_t>(weights_->shape.hidden);
  for (size_t l = 0; l < c.keys.size(); ++l) {
    c.keys[l].resize(std::min(c.keys[l].size(), position * d));
    c.values[l].resize(std::min(c.values[l].size(), position * d));
  }
  c.length = position;
}

void Model::release(uint64_t request_id) {
  if (caches_.erase(request_id) == 0) {
    throw std::invalid_argument("Model::release: request " + std::to_string(request_id) +
                                " is not live (never admitted or forwarded, or already released)");
  }
  // Causal scope creates a layer's state at the request's first forward pass: it may be missing.
  for (auto& state : routing_) state.release_if_held(request_id);
}

void Model::clear() {
  caches_.clear();
  for (auto& state : routing_) state.clear();
}

uint32_t Model::cache_length(uint64_t request_id) const {
  auto it = caches_.find(request_id);
  return it == caches_.end() ? 0 : it->second.length;
}

int32_t Model::argmax(const float* logits, int vocab_size) {
  int32_t best = 0;
  float best_value = -INFINITY;
  bool found = false;
  for (int i = 0; i < vocab_size; ++i) {
    if (std::isnan(logits[i])) continue;
    if (!found || logits[i] > best_value) {
      best = i;
      best_value = logits[i];
      found = true;
    }
  }
  return best;
}

void Model::validate_rows(std::span<const BatchRow> rows) const {
  const ModelShape& s = weights_->shape;
  if (rows.empty()) throw std::invalid_argument("Model::forward: empty batch");
  std::unordered_map<uint64_t, uint32_t> next;  // request -> next expected position
  for (size_t r = 0; r < rows.size(); ++r) {
    const BatchRow& row = rows[r];
    if (row.token < 0 || row.token >= s.vocab_size) {
      throw std::invalid_argument("Model::forward: row " + std::to_string(r) + " has token " +
                                  std::to_string(row.token) + " outside [0, " + std::to_string(s.vocab_size) +
                                  ")");
    }
    if (row.position >= static_cast<uint32_t>(s.max_positions)) {
      throw std::invalid_argument("Model::forward: row " + std::to_string(r) + " has position " +
                                  std::to_string(row.position) + " beyond max_positions (" +
                                  std::to_string(s.max_positions) + ")");
    }
    auto it = next.find(row.request_id);
    if (it == next.end()) {
      if (rules::pools_prompt(options_.policy) && !is_live(row.request_id)) {
        throw std::invalid_argument(
            "Model::forward: row " + std::to_string(r) + ": request " + std::to_string(row.request_id) +
            " was not admitted (sequence and prefix scopes need Model::admit with its prompt "
            "length before its first forward pass)");
      }
      it = next.emplace(row.request_id, cache_length(row.request_id)).first;
    }
    if (row.position != it->second) {
      throw std::invalid_argument(
          "Model::forward: row " + std::to_string(r) + " of request " + std::to_string(row.request_id) +
          " has position " + std::to_string(row.position) + " but the request expects position " +
          std::to_string(it->second) + " (rows must continue the cache in ascending order)");
    }
    ++it->second;
  }
}

void Model::forward(std::span<const BatchRow> rows, std::vector<int32_t>& logit_rows,
                    std::vector<float>& logits, ForwardStats* stats, LogitRows which) {
  validate_rows(rows);
  const ModelShape& s = weights_->shape;
  const int num_rows = static_cast<int>(rows.size());
  const int64_t d = s.hidden;
  const size_t nd = static_cast<size_t>(num_rows) * d;
  for (auto* buf : {&h_, &norm_, &q_, &k_, &v_, &attn_, &proj_, &moe_out_}) {
    if (buf->size() < nd) buf->resize(nd);
  }
  meta_.resize(num_rows);
  row_cache_.resize(num_rows);
  uint32_t max_keys = 0;
  for (int r = 0; r < num_rows; ++r) {
    meta_[r] = TokenMeta{rows[r].request_id, rows[r].position};
    RequestCache& c = caches_[rows[r].request_id];
    if (c.keys.empty()) {
      c.keys.resize(s.num_layers);
      c.values.resize(s.num_layers);
    }
    row_cache_[r] = &c;
    max_keys = std::max(max_keys, rows[r].position + 1);
    std::memcpy(h_.data() + r * d, weights_->embedding.data() + static_cast<int64_t>(rows[r].token) * d,
                sizeof(float) * d);
  }
  if (scores_.size() < max_keys) scores_.resize(max_keys);
  const int half = s.head_dim() / 2;
  if (rope_positions_ < max_keys) {
    rope_cos_.resize(static_cast<size_t>(max_keys) * half);
    rope_sin_.resize(static_cast<size_t>(max_keys) * half);
    for (uint32_t p = rope_positions_; p < max_keys; ++p) {
      rope_angles(p, s.head_dim(), s.rope_theta, rope_cos_.data() + size_t{p} * half,
                  rope_sin_.data() + size_t{p} * half);
    }
    rope_positions_ = max_keys;
  }
  const bool stateful = rules::carries_routing_state(options_.policy);
  if (stats) {
    stats->dropped_pairs.assign(num_rows, 0);
    stats->layers.resize(s.num_layers);
  }
  const kernels::KernelKind kind = options_.kernel;

  for (int l = 0; l < s.num_layers; ++l) {
    const BlockWeights& b = weights_->layers[l];
    // Attention block.
    for (int r = 0; r < num_rows; ++r) {
      rms_norm(h_.data() + r * d, b.attn_norm.data(), d, s.rms_eps, norm_.data() + r * d);
    }
    kernels::linear(kind, norm_.data(), num_rows, d, view(b.wq, d, d), q_.data(), d, pool_);
    kernels::linear(kind, norm_.data(), num_rows, d, view(b.wk, d, d), k_.data(), d, pool_);
    kernels::linear(kind, norm_.data(), num_rows, d, view(b.wv, d, d), v_.data(), d, pool_);
    for (int r = 0; r < num_rows; ++r) {
      const float* cos = rope_cos_.data() + size_t{rows[r].position} * half;
      const float* sin = rope_sin_.data() + size_t{rows[r].position} * half;
      rotate_rope(q_.data() + r * d, s.num_heads, s.head_dim(), cos, sin);
      rotate_rope(k_.data() + r * d, s.num_heads, s.head_dim(), cos, sin);
      // Rows of a request come in ascending position order, each continuing the cache: append.
      RequestCache& c = *row_cache_[r];
      c.keys[l].insert(c.keys[l].end(), k_.data() + r * d, k_.data() + (r + 1) * d);
      c.values[l].insert(c.values[l].end(), v_.data() + r * d, v_.data() + (r + 1) * d);
    }
    for (int r = 0; r < num_rows; ++r) {
      const RequestCache& c = *row_cache_[r];
      attention_row(q_.data() + r * d, c.keys[l].data(), c.values[l].data(), rows[r].position + 1,
                    s.num_heads, s.head_dim(), attn_.data() + r * d, scores_.data());
    }
    kernels::linear(kind, attn_.data(), num_rows, d, view(b.wo, d, d), proj_.data(), d, pool_);
    for (size_t i = 0; i < nd; ++i) h_[i] += proj_[i];
    // MoE block.
    for (int r = 0; r < num_rows; ++r) {
      rms_norm(h_.data() + r * d, b.moe_norm.data(), d, s.rms_eps, norm_.data() + r * d);
    }
    layers_[l]->forward(norm_.data(), num_rows, meta_, moe_out_.data(), stateful ? &routing_[l] : nullptr,
                        stats ? &stats->layers[l] : nullptr);
    for (size_t i = 0; i < nd; ++i) h_[i] += moe_out_[i];
    if (stats) {
      const DispatchPlan& plan = layers_[l]->last_plan();
      for (int r = 0; r < num_rows; ++r) {
        for (int j = 0; j < plan.top_k; ++j) {
          if (plan.pair_status[static_cast<size_t>(r) * plan.top_k + j] == PairStatus::kDropped) {
            ++stats->dropped_pairs[r];
          }
        }
      }
    }
  }
  for (int r = 0; r < num_rows; ++r) row_cache_[r]->length = rows[r].position + 1;

  // Logits for the last row of each request in the batch.
  logit_rows.clear();
  for (int r = 0; r < num_rows; ++r) {
    // The cache now ends at the request's last row of this batch.
    if (which == LogitRows::kEvery || row_cache_[r]->length == rows[r].position + 1) logit_rows.push_back(r);
  }
  const int num_out = static_cast<int>(logit_rows.size());
  for (int i = 0; i < num_out; ++i) {
    rms_norm(h_.data() + logit_rows[i] * d, weights_->final_norm.data(), d, s.rms_eps, norm_.data() + i * d);
  }
  logits.resize(static_cast<size_t>(num_out) * s.vocab_size);
  kernels::linear(kind, norm_.data(), num_out, d, view(weights_->lm_head, s.vocab_size, d), logits.data(),
                  s.vocab_size, pool_);
}

std::vector<int32_t> Model::generate(uint64_t request_id, std::span<const int32_t> prompt, int num_new_tokens,
                                     int chunk) {
  if (prompt.empty()) throw std::invalid_argument("Model::generate: empty prompt");
  if (num_new_tokens < 0 || chunk < 0) {
    throw std::invalid_argument("Model::generate: num_new_tokens and chunk must be >= 0");
  }
  if (is_live(request_id)) {
    throw std::invalid_argument("Model::generate: request " + std::to_string(request_id) +
                                " is already live");
  }
  admit(request_id, static_cast<uint32_t>(prompt.size()));
  std::vector<int32_t> out;
  std::vector<int32_t> logit_rows;
  std::vector<float> logits;
  std::vector<BatchRow> rows;
  const int n = static_cast<int>(prompt.size());
  const int step = chunk == 0 ? n : chunk;
  try {
    for (int begin = 0; begin < n && num_new_tokens > 0; begin += step) {
      rows.clear();
      for (int p = begin; p < std::min(n, begin + step); ++p) {
        rows.push_back({request_id, static_cast<uint32_t>(p), prompt[p]});
      }
      forward(rows, logit_rows, logits);
    }
    while (static_cast<int>(out.size()) < num_new_tokens) {
      const int32_t next = argmax(logits.data(), shape().vocab_size);
      out.push_back(next);
      if (static_cast<int>(out.size()) == num_new_tokens) break;
      rows.assign(1, BatchRow{request_id, static_cast<uint32_t>(n + out.size() - 1), next});
      forward(rows, logit_rows, logits);
    }
  } catch (...) {
    release(request_id);
    throw;
  }
  release(request_id);
  return out;
}

}  // namespace moe::model
