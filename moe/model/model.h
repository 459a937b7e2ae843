// A small decoder-only MoE language model with per-request KV caches, for continuous-batching experiments.
//
//   h = embed(token)
//   per layer: h += o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n)))   n = RMSNorm(h)
//              h += MoELayer(RMSNorm(h))
//   logits = lm_head(RMSNorm(h))
//
// Determinism: with ModelOptions{kInvariant, a policy of scope request/causal/none} the logits of a request's
// rows are bitwise independent of the other requests in the batch and of the row order; with causal or none
// scope they are also independent of how its prompt was chunked across forward passes, so decoding with the
// KV cache gives the same bits as recomputing the whole sequence (tests/model_invariance_test.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "moe/layer/moe_layer.h"
#include "moe/model/model_config.h"
#include "moe/model/model_weights.h"
#include "router/routing_state.h"

namespace moe::model {

// One row of a batch: token `token` of request `request_id` at `position` (0 = its first prompt token).
struct BatchRow {
  uint64_t request_id = 0;
  uint32_t position = 0;
  int32_t token = 0;
};

// Routing outcome of one forward pass.
struct ForwardStats {
  std::vector<int32_t> dropped_pairs;  // per row: pairs dropped, summed over the layers
  std::vector<MoEStats> layers;        // per layer
};

// Which rows forward() returns logits for.
//   kLastPerRequest  the last row of each request present in the batch (what decoding samples from)
//   kEvery           every row (scoring text: perplexity)
enum class LogitRows { kLastPerRequest, kEvery };

// Not thread-safe: one Model serves one thread (it owns the KV caches, the layers' workspaces and a
// single-threaded pool). Several Models may share one ModelWeights.
class Model {
 public:
  // Throws std::invalid_argument for invalid weights or options.
  Model(std::shared_ptr<const ModelWeights> weights, ModelOptions options);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Runs one forward pass over `rows` (any mix of prefill chunks and decode tokens, in any interleaving),
  // appends each row's keys and values to its request's cache, and returns logits for the last row of each
  // request present in the batch: logit_rows[i] is that row's index (ascending), logits[i * vocab ..) its
  // vocab_size logits. A request's rows must carry consecutive positions starting at its cache length (0
  // for a new request) and appear in ascending position order; tokens must lie in [0, vocab_size) and
  // positions below max_positions. Rows are passed to the MoE layers in this order with TokenMeta
  // (request_id, position), and one RoutingState per layer under causal and sequence scopes. Under
  // sequence scope (the default "stable" policy) every request must be admitted first.
  // Errors: std::invalid_argument (nothing is changed) for an empty batch, a bad token or position, a
  // request not admitted under sequence scope.
  // `which` = kEvery returns every row's logits (logit_rows = 0 .. rows - 1).
  void forward(std::span<const BatchRow> rows, std::vector<int32_t>& logit_rows, std::vector<float>& logits,
               ForwardStats* stats = nullptr, LogitRows which = LogitRows::kLastPerRequest);

  // Announces a request that will send a prompt of `prompt_length` tokens (in chunks of any size) and then
  // decode: sequence scope sizes the request's expert budgets from it. Needed under sequence scope before
  // the request's first forward(); accepted under every scope. Throws std::invalid_argument if
  // prompt_length is 0 or the request is live (admitted or with cached tokens).
  void admit(uint64_t request_id, uint32_t prompt_length);
  // A conversation's turn: the earlier turns' prompts and answers and a new message, as `turn_ends` describes
  // them (router/rules/turn_rules.h; RoutingState::admit). Throws std::invalid_argument for invalid turn
  // ends, and as above.
  void admit(uint64_t request_id, std::span<const uint32_t> turn_ends);
  // Forgets a finished request: its KV cache and routing state. Throws std::invalid_argument if the model
  // does not hold it (neither admitted nor forwarded).
  void release(uint64_t request_id);
  // Forgets every request.
  void clear();
  // Tokens cached for `request_id` (0 if unknown).
  uint32_t cache_length(uint64_t request_id) const;
  // Whether the model holds the request (admitted or forwarded, not yet released).
  bool is_live(uint64_t request_id) const { return caches_.count(request_id) != 0; }
  size_t num_requests() const { return caches_.size(); }

  // A block of a prefix cache: positions [begin, end) of a request as the model computed them - per layer
  // their keys and values ([end - begin, hidden] each) and, under the scopes that carry a routing state, the
  // routing segment of each MoE layer (ModelOptions::record_routing).
  struct CachedBlock {
    uint32_t begin = 0, end = 0;
    std::vector<std::vector<float>> keys, values;  // per layer
    std::vector<RoutingSegment> routing;           // per layer (empty: no routing state)
  };
  // Copies positions [begin, end) of a live request. Throws std::invalid_argument when the request is not
  // live, [begin, end) is not within its cache, or (stateful scope) the model does not record routing.
  CachedBlock cached_block(uint64_t request_id, uint32_t begin, uint32_t end) const;
  // Admits a request whose positions [0, P) come from a prefix cache: `blocks` in order from position 0
  // (contiguous). Their keys and values become its cache; each layer's routing state restores its segment
  // (RoutingState::restore checks that they are this request's routing: prefix_cache_salt).
  // ignore_salt: take the segments as this request's whatever prompt length they were planned for - what an
  // engine that keys its prefix cache by tokens alone does (the divergence lab's counter-check of sequence
  // scope). Throws std::invalid_argument, changing nothing, for a live request, blocks that do not tile
  // [0, P), a block whose routing segments cover other positions than its KV, or segments that
  // RoutingState::restore refuses.
  void admit_cached(uint64_t request_id, uint32_t prompt_length, std::span<const CachedBlock* const> blocks,
                    bool ignore_salt = false);
  // The same for a conversation's turn (admit above): blocks computed by earlier turns are accepted where
  // their routing is this turn's (prefix_cache_turns).
  void admit_cached(uint64_t request_id, std::span<const uint32_t> turn_ends,
                    std::span<const CachedBlock* const> blocks, bool ignore_salt = false);
  // Forgets a live request's positions >= position: its KV cache is truncated and its routing states roll
  // back (rejected speculative tokens). Throws std::invalid_argument, changing nothing, where
  // RoutingState::rollback would, or when position is past the request's cache.
  void rollback(uint64_t request_id, uint32_t position);

  // Greedy decoding of one request alone: admit it, prefill `prompt` in chunks of `chunk` rows (0 = one
  // pass), then generate `num_new_tokens` tokens, feeding each back. The request is released afterwards.
  // Throws std::invalid_argument if the request is live.
  std::vector<int32_t> generate(uint64_t request_id, std::span<const int32_t> prompt, int num_new_tokens,
                                int chunk = 0);

  // The greedy choice: the index of the largest logit, ties to the lower id (NaN never wins).
  static int32_t argmax(const float* logits, int vocab_size);

  const ModelShape& shape() const { return weights_->shape; }
  const ModelOptions& options() const { return options_; }
  const MoELayer& moe_layer(int layer) const { return *layers_[layer]; }

 private:
  struct RequestCache {
    uint32_t length = 0;
    std::vector<std::vector<float>> keys, values;  // per layer: [length, hidden]
  };

  void validate_rows(std::span<const BatchRow> rows) const;

  std::shared_ptr<const ModelWeights> weights_;
  ModelOptions options_;
  kernels::ThreadPool pool_;
  std::vector<std::unique_ptr<MoELayer>> layers_;
  std::vector<RoutingState> routing_;  // one per layer, used under causal and sequence scopes
  std::unordered_map<uint64_t, RequestCache> caches_;

  // Workspace (grows to the largest batch).
  std::vector<TokenMeta> meta_;
  std::vector<float> h_, norm_, q_, k_, v_, attn_, proj_, moe_out_, scores_;
  // The rotary angles of positions [0, rope_positions_) (rope_angles): cos and sin, head_dim / 2 each.
  std::vector<float> rope_cos_, rope_sin_;
  uint32_t rope_positions_ = 0;
  std::vector<RequestCache*> row_cache_;
};

}  // namespace moe::model
