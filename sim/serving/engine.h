// The one model of a serving engine that both the workload simulation (`moe-sim run` / `sweep`) and the
// divergence lab drive (docs/divergence.md, "The serving engine"): continuous batching with chunked prefill
// under a token budget, in the style of vLLM's v1 scheduler, plus what every production engine adds and what
// changes which rows of a request reach the MoE layers, and when:
//   - a block prefix cache (KV blocks of block_size positions, keyed by their prefix - a SHA-256 chain over
//     every block's positions, tokens and the key extension the client's salt() gives, sim/serving/
//     block_key.h - shared by all requests, least recently used evicted first);
//   - recompute preemption when a step's rows need more KV blocks than the pool has: the latest-started
//     running request is released and later re-prefilled (its prompt and generated tokens, as prefill
//     chunks, with whatever of its blocks the cache still holds);
//   - speculative decoding: a decoding request sends its last token and up to spec_tokens draft tokens (the
//     client's prompt-lookup proposal) in one pass; the client reports how many rows it accepted, the engine
//     rolls the rest back.
// The engine decides rows and lifecycle events; it never sees activations. A step (Step, below) is planned by
// next() and completed by complete() once the client has said which rows it accepts; the one driver of that
// lifecycle - the order in which a step's events reach a model or a routing state - is
// sim/serving/lifecycle.h. Deterministic: the same requests, config and client answers give the same steps.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "router/token_meta.h"
#include "sim/serving/block_pool.h"

namespace moe::sim::serving {

struct EngineConfig {
  int token_budget = 64;  // rows per step
  int chunk_size = 0;     // most prompt rows a request computes in one step (0: the budget only)
  int max_running = 256;  // most requests running at once
  bool prefix_cache = false;
  int block_size = 16;
  // KV memory in blocks: running requests hold the blocks of their positions, the prefix cache keeps
  // released ones while there is room. 0: unbounded memory, no block accounting and no preemption - allowed
  // only without the prefix cache (which needs a pool to live in).
  int64_t kv_blocks = 0;
  int spec_tokens = 0;  // most draft tokens per decode step (0: no speculation)
  // Keep every request's RequestStats after it finishes (request_stats()); off, only live requests' are
  // kept, so that the engine's memory follows the live requests, not the workload.
  bool keep_request_stats = false;

  // Throws std::invalid_argument naming the bad field.
  void validate() const;
};

inline constexpr uint64_t kNoRequest = ~uint64_t{0};

struct EngineRequest {
  uint64_t id = 0;
  int64_t arrival_step = 0;
  uint32_t prompt_length = 1;
  uint32_t max_new_tokens = 1;  // generated tokens before the request finishes (>= 1)
  uint64_t client_index = 0;    // the client's own handle of the request (the engine only passes it back)
  // A conversation's turn (docs/routing.md, "Conversations"): its prompt is the earlier turns' prompts and
  // answers and a new message, as these turn ends describe them (router/rules/turn_rules.h; the last one is
  // prompt_length); empty: a single turn. The engine only passes them on (Admission) and to salt().
  std::vector<uint32_t> turn_ends{};
  // The turn that follows another (the user's next message): it arrives think_steps steps after request
  // `follows` finishes (arrival_step is then ignored). kNoRequest: it arrives at arrival_step.
  uint64_t follows = kNoRequest;
  int64_t think_steps = 0;

  // Its turn ends: turn_ends, or {prompt_length} for a single turn.
  std::span<const uint32_t> turns() const {
    return turn_ends.empty() ? std::span<const uint32_t>(&prompt_length, 1)
                             : std::span<const uint32_t>(turn_ends);
  }
};

// What the engine asks of whoever runs the model. Token values only feed the prefix cache's block keys.
class EngineClient {
 public:
  virtual ~EngineClient() = default;
  // The token at `position` of the request: a prompt token (position < L) or one it generated (position <
  // its known tokens).
  virtual uint64_t token(const EngineRequest& request, uint32_t position) = 0;
  // How many draft tokens (<= max) to verify after the request's last token this step, the first of them at
  // position `first_draft`.
  virtual int propose(const EngineRequest& request, uint32_t first_draft, int max) = 0;
  // The prefix cache's key extension of the request's block that ends at `block_end` (the lab and the
  // simulator: prefix_cache_salt of the dispatch rule at the request's prompt length; 0 for a cache keyed by
  // tokens alone). Everything but the tokens that makes a block's computation this request's must be in it:
  // the block key (block_key.h) covers the parent block, the positions, the tokens and this value only.
  virtual uint64_t salt(const EngineRequest& request, uint32_t block_end) = 0;
};

// A request's rows in one step: positions [begin, end), consecutive rows of Step::rows starting at `row`.
// drafts > 0: rows begin + 1 .. end - 1 are draft tokens. samples: the last accepted row's logits give the
// request's next token.
struct Span {
  uint64_t id = 0;
  uint32_t begin = 0, end = 0;
  int32_t row = 0;
  int32_t drafts = 0;
  bool samples = false;
  uint64_t client_index = 0;  // EngineRequest::client_index
};

// A request entering the running set: new (admit with its prompt length) or resumed after a preemption;
// positions [0, cached) come from the blocks `blocks` of the prefix cache (restore from their payloads),
// block i holding positions [i * block_size, (i + 1) * block_size) and matched under keys[i].
struct Admission {
  uint64_t id = 0;
  uint32_t prompt_length = 0;
  uint32_t cached = 0;
  std::vector<int32_t> blocks;  // cached / block_size blocks
  bool resumed = false;
  std::vector<BlockKey> keys{};       // the key each block was matched under
  std::vector<uint32_t> turn_ends{};  // EngineRequest::turn_ends (empty: one turn)

  std::span<const uint32_t> turns() const {  // turn_ends, or {prompt_length}
    return turn_ends.empty() ? std::span<const uint32_t>(&prompt_length, 1)
                             : std::span<const uint32_t>(turn_ends);
  }
};

// A block the cache now holds under `key`: positions [begin, end) of request `id` (their payload is to be
// kept; sim/serving/block_store.h keeps it tagged with the key and positions).
struct Registered {
  int32_t block = 0;
  uint64_t id = 0;
  uint32_t begin = 0, end = 0;
  BlockKey key{};
};

// One step of the engine, the one step type of everything that drives it (sim/serving/lifecycle.h). Three
// parts, filled in turn:
//   the plan (Engine::next)      preempted requests (release them), admissions (admit, or restore the cached
//                                positions from the blocks' payloads), then the rows of the forward pass,
//                                span by span
//   the verdict (the client)     accepted[i]: the rows of span i it accepts, in [1, end - begin] (a prompt
//                                chunk all of them; a speculative span 1 + its accepted drafts)
//   the outcome (Engine::complete)  rollbacks (forget the rejected positions), newly registered blocks (keep
//                                their payload: KV, routing segments), finished requests (release)
struct Step {
  int64_t index = 0;  // the step number (idle steps, with nothing to run, are skipped: it jumps)
  std::vector<uint64_t> preempted;
  std::vector<Admission> admitted;
  std::vector<Span> spans;
  std::vector<TokenMeta> rows;
  std::vector<uint32_t> accepted;
  std::vector<TokenMeta> rollbacks;  // (request, position): forget its positions >= position
  std::vector<Registered> registered;
  std::vector<uint64_t> finished;
};

// Per request, over its life.
struct RequestStats {
  uint32_t prompt_length = 0;
  uint32_t cached_at_admission = 0;  // positions its first admission found in the cache
  int64_t cached_tokens = 0;         // positions served from the cache, every admission
  int64_t computed_rows = 0;         // rows computed (accepted or not)
  int32_t preemptions = 0;
  int64_t drafted = 0;   // draft rows sent
  int64_t accepted = 0;  // draft rows accepted
  bool finished = false;
};

struct EngineStats {
  int64_t steps = 0, rows = 0;
  int64_t prompt_tokens = 0;         // prompt positions of admitted requests (first admissions)
  int64_t cached_prompt_tokens = 0;  // ... of those, served from the cache at first admission
  int64_t cached_tokens = 0;         // positions served from the cache, every admission (resumptions too)
  int64_t preemptions = 0, drafted = 0, accepted = 0, evictions = 0;
  int64_t peak_blocks_used = 0;
};

class Engine {
 public:
  // Requests with duplicate ids, prompt_length 0 or max_new_tokens 0 throw std::invalid_argument; so does
  // a request whose prompt and tokens could never fit the pool, invalid turn ends (or ones whose last is not
  // prompt_length), a negative think time, and a request that follows an unknown request, itself, or one
  // that (through others) follows it.
  Engine(EngineConfig config, std::vector<EngineRequest> requests, EngineClient& client);

  // Plans the next step into `step` (every part of it rewritten, its vectors' capacity reused; idle steps,
  // with nothing to run, are skipped: step.index jumps); false when every request has finished. The previous
  // step must have been completed.
  bool next(Step& step);
  // Completes the planned step with the client's step.accepted (one count per span, each in [1, end - begin];
  // all the rows of a span without drafts): fills its rollbacks, registered blocks and finished requests.
  // Throws std::invalid_argument for a bad count (the step stays pending).
  void complete(Step& step);

  const EngineConfig& config() const { return config_; }
  const EngineStats& stats() const { return stats_; }
  // A live request's stats, or a finished one's with keep_request_stats. Throws std::invalid_argument when
  // the engine has none.
  RequestStats request_stats(uint64_t id) const;
  bool all_finished() const { return finished_ == requests_.size(); }
  int64_t now() const { return now_; }

 private:
  struct Live {
    const EngineRequest* spec = nullptr;
    uint32_t known = 0;     // tokens known: the prompt and what it generated
    uint32_t computed = 0;  // positions whose KV is computed
    std::vector<int32_t> blocks;
    std::vector<BlockKey> keys;  // the chain keys of its first blocks (those it registered or matched)
    int64_t started = 0;         // start order
    RequestStats stats;
    bool admitted_once = false;
  };
  // What the engine keeps of a planned span for complete(): the live request it belongs to and its rows.
  struct Pending {
    size_t slot = 0;
    uint32_t begin = 0, end = 0;
    int32_t drafts = 0;
  };

  // next()'s phases, in order.
  void take_arrivals();                            // requests whose arrival step has come start waiting
  void continue_running(Step& step, int& budget);  // running requests' next chunk or decode row (+ drafts)
  void start_waiting(Step& step, int& budget);     // waiting requests start: cached prefix, first chunk
  uint32_t match_cached_prefix(Live& l, Admission& a);  // the prefix cache's blocks of a starting request
  void add_span(Step& step, size_t slot, uint32_t rows, int drafts, int& budget);
  // complete()'s work on one span: accepted drafts, computed positions, blocks to register, the finish.
  void complete_span(const Pending& span, uint32_t accepted, Step& step);

  // The key of block i of `l` (positions [i * bs, (i + 1) * bs)), given its parent's (block_key.h).
  BlockKey key_of(const Live& l, uint32_t block, const BlockKey& parent);
  bool reserve_blocks(Live& l, uint32_t end, int64_t protect_started, Step& step);
  void preempt(size_t running_index, Step& step);
  void release_blocks(Live& l);

  EngineConfig config_;
  EngineClient& client_;
  std::vector<EngineRequest> requests_;  // sorted by (follows set, arrival_step, id)
  size_t first_follower_ = 0;            // requests_[first_follower_ ..] arrive after the request they follow
  std::unordered_map<uint64_t, std::vector<size_t>> followers_;  // id -> indices of the turns that follow it
  // Followers whose arrival step is known (their predecessor finished): (arrival step, id, index), a
  // min-heap.
  std::vector<std::tuple<int64_t, uint64_t, size_t>> due_;
  std::vector<Live> live_;  // slots of the arrived, unfinished requests (waiting_ and running_)
  std::vector<size_t> free_slots_;
  std::unordered_map<uint64_t, RequestStats> finished_stats_;  // keep_request_stats
  size_t next_arrival_ = 0;
  std::deque<size_t> waiting_;
  std::vector<size_t> running_;    // in start order
  std::optional<BlockPool> pool_;  // kv_blocks > 0
  int64_t now_ = 0;
  int64_t starts_ = 0;
  size_t finished_ = 0;
  bool pending_complete_ = false;
  std::vector<Pending> pending_;  // the planned step's spans, in order
  EngineStats stats_;
  std::vector<BlockKey> scratch_keys_;
  std::vector<uint64_t> scratch_tokens_;
};

}  // namespace moe::sim::serving
