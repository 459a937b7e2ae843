#include "moe/parallel/expert_parallel_layer.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "base/splitmix64.h"
#include "kernels/cpu/linear.h"
#include "moe/layer/combine.h"
#include "moe/layer/expert_ffns.h"
#include "moe/layer/expert_schedule.h"

namespace moe::parallel {
namespace {

// A rank's token count in the first exchange of a step when its input was rejected.
constexpr size_t kRejected = std::numeric_limits<size_t>::max();

// Routing record of one token, as it travels in the metadata all-gather (host byte order; every rank of a
// job is assumed to share it):
//   [0, 8) request_id u64   [8, 12) position u32   [12, 16) top-1 score f32
//   [16, 16 + 4R) ranked experts i32   [16 + 4R, 16 + 8R) weights f32
constexpr size_t kRecordHeaderBytes = 16;

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument("expert parallel layer: " + msg);
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

std::string rank_list(std::span<const size_t> values, size_t flag) {
  std::string out;
  for (size_t r = 0; r < values.size(); ++r) {
    if (values[r] == flag) out += (out.empty() ? "" : ", ") + std::to_string(r);
  }
  return out;
}

template <class T>
uint64_t mix_all(uint64_t h, const std::vector<T>& v) {
  h = hash_combine64(h, v.size());
  for (const T& x : v) {
    uint64_t bits = 0;
    if constexpr (std::is_same_v<T, float>) {
      bits = std::bit_cast<uint32_t>(x);
    } else {
      bits = static_cast<uint64_t>(x);
    }
    h = hash_combine64(h, bits);
  }
  return h;
}

}  // namespace

uint64_t plan_hash(const DispatchPlan& plan) {
  uint64_t h = hash_combine64(0x706c616e68617368ull, static_cast<uint64_t>(plan.num_tokens));
  h = hash_combine64(h, static_cast<uint64_t>(plan.top_k));
  h = hash_combine64(h, static_cast<uint64_t>(plan.num_experts));
  h = hash_combine64(h, static_cast<uint64_t>(plan.batch_capacity));
  const size_t pairs = static_cast<size_t>(plan.num_pairs());
  // Only the first num_pairs() entries are meaningful (the vectors may hold more capacity, never more size).
  h = hash_combine64(h, pairs);
  for (size_t p = 0; p < pairs && p < plan.pair_expert.size(); ++p) {
    h = hash_combine64(h, static_cast<uint64_t>(static_cast<uint32_t>(plan.pair_expert[p])));
    h = hash_combine64(h, static_cast<uint64_t>(static_cast<uint32_t>(plan.pair_slot[p])));
    h = hash_combine64(h, std::bit_cast<uint32_t>(plan.pair_weight[p]));
    h = hash_combine64(h, static_cast<uint64_t>(plan.pair_status[p]));
  }
  h = mix_all(h, plan.expert_load);
  h = mix_all(h, plan.expert_capacity);
  h = mix_all(h, plan.expert_offsets);
  h = mix_all(h, plan.slot_pairs);
  h = hash_combine64(h, static_cast<uint64_t>(plan.num_kept));
  h = hash_combine64(h, static_cast<uint64_t>(plan.num_rerouted));
  h = hash_combine64(h, static_cast<uint64_t>(plan.num_dropped));
  return hash_combine64(h, static_cast<uint64_t>(plan.num_tokens_fully_dropped));
}

ExpertParallelLayer::ExpertParallelLayer(MoELayerConfig config,
                                         std::shared_ptr<const io::LayerWeights> weights, Communicator& comm,
                                         std::optional<ExpertPlacement> placement,
                                         ExpertParallelOptions options)
    : weights_(std::move(weights)),
      comm_(comm),
      placement_(ExpertPlacement::contiguous(1, 1)),
      options_(options) {
  const int P = comm_.size();
  counts_.resize(P);
  hash_gather_.resize(P);
  token_offset_.assign(P + 1, 0);
  record_bytes_per_rank_.resize(P);
  send_rows_.resize(P);
  recv_rows_.resize(P);
  send_row_offset_.resize(P + 1);
  recv_row_offset_.resize(P + 1);
  cursor_.resize(2 * static_cast<size_t>(P));
  send_bytes_.resize(P);
  recv_bytes_.resize(P);

  // Local validation first; its outcome is agreed collectively so that a rank with a bad configuration
  // makes every rank fail at once instead of leaving the others waiting in the consistency checks.
  std::string error;
  try {
    if (!weights_) fail("weights must not be null");
    if (comm_.memory_space() != MemorySpace::kHost) {
      fail("the communicator '" + comm_.name() + "' works on " +
           std::string(to_string(comm_.memory_space())) +
           " memory; this CPU layer needs a host-memory communicator (single, mpi). The GPU layer will use "
           "device-memory communicators (docs/expert-parallel.md)");
    }
    config_ = config.fitted_to(*weights_);
    const int E = config_.router.num_experts;
    placement_ = placement ? *placement : ExpertPlacement::contiguous(E, P);
    if (placement_.num_experts() != E) {
      fail("the placement maps " + std::to_string(placement_.num_experts()) + " experts but the layer has " +
           std::to_string(E));
    }
    if (placement_.world_size() != P) {
      fail("the placement is for " + std::to_string(placement_.world_size()) +
           " ranks but the communicator has " + std::to_string(P));
    }
    hidden_ = weights_->shape().hidden;
    local_experts_ = placement_.experts_of(comm_.rank());
    ffns_ = std::make_unique<ExpertFfns>(config_, *weights_, local_experts_);
    has_shared_ = ffns_->has_shared();
    pool_.emplace(config_.num_threads);
    planner_.emplace(E, config_.router.top_k, config_.policy);
    router_.emplace(config_.router, planner_->num_ranked_needed());
    record_bytes_ = kRecordHeaderBytes + 8 * static_cast<size_t>(router_->num_ranked());
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  comm_.all_gather_sizes(error.empty() ? 0 : 1, hash_gather_);
  const std::string failing = rank_list(hash_gather_, 1);
  if (!failing.empty()) {
    if (!error.empty()) throw std::invalid_argument(error + " (rank " + std::to_string(comm_.rank()) + ")");
    throw std::invalid_argument("expert parallel layer: rank(s) " + failing +
                                " rejected the layer's configuration (see their messages)");
  }

  comm_.check_consistent(config_.config_hash(), "layer config (experts/k/policy/kernels)");
  comm_.check_consistent(weights_->content_hash(), "layer weights");
  comm_.check_consistent(placement_.hash(), "expert placement");

  active_experts_.reserve(local_experts_.size());
  local_slot_base_.assign(num_experts(), -1);
  local_rows_.assign(num_experts(), 0);
  home_index_.assign(P, 0);
  ensure_local(config_.max_tokens);
  ensure_global(static_cast<int64_t>(config_.max_tokens) * P);
}

ExpertParallelLayer::~ExpertParallelLayer() = default;

void ExpertParallelLayer::ensure_local(int num_tokens) {
  if (num_tokens <= local_capacity_) return;
  const int E = num_experts(), k = top_k();
  const size_t T = static_cast<size_t>(num_tokens);
  logits_.resize(T * E);
  local_routes_.resize(num_tokens, E, k, router_->num_ranked());
  records_out_.resize(T * record_bytes_);
  return_row_.resize(T * k);
  send_token_.resize(T * k);
  send_pair_.resize(T * k);
  home_rows_.resize(T * k * hidden_);
  if (has_shared_) {
    shared_out_.resize(T * hidden_);
    shared_gate_logit_.resize(T);
    grow(scratch_, ffns_->shared_scratch_floats(num_tokens));
  }
  local_capacity_ = num_tokens;
}

void ExpertParallelLayer::ensure_global(int64_t global_tokens) {
  if (global_tokens <= global_capacity_) return;
  const int E = num_experts(), k = top_k();
  const size_t T = static_cast<size_t>(global_tokens);
  records_in_.resize(T * record_bytes_);
  global_routes_.resize(static_cast<int>(global_tokens), E, k, router_->num_ranked());
  global_meta_.resize(T);
  token_home_.resize(T);
  planner_->reserve(static_cast<int>(global_tokens));
  plan_.reserve(static_cast<int>(global_tokens), k, E);
  // The rows this rank's experts can receive: each owned expert holds at most one pair per token.
  const size_t rows = T * std::min<size_t>(k, local_experts_.size());
  recv_to_local_.resize(rows);
  owner_rows_.resize(rows * hidden_);
  gathered_.resize(rows * hidden_);
  expert_out_.resize(rows * hidden_);
  if (!local_experts_.empty()) {
    per_thread_scratch_ = ffns_->expert_scratch_floats(std::min<int64_t>(global_tokens, kSmallExpertRows));
    grow(scratch_, std::max(ffns_->expert_scratch_floats(global_tokens),
                            per_thread_scratch_ * static_cast<size_t>(config_.num_threads)));
  }
  global_capacity_ = global_tokens;
}

size_t ExpertParallelLayer::workspace_bytes() const {
  return (logits_.capacity() + home_rows_.capacity() + shared_out_.capacity() +
          shared_gate_logit_.capacity() + owner_rows_.capacity() + gathered_.capacity() +
          expert_out_.capacity() + scratch_.capacity() + local_routes_.weights.capacity() +
          local_routes_.top1_score.capacity() + global_routes_.weights.capacity() +
          global_routes_.top1_score.capacity() + plan_.pair_weight.capacity()) *
             sizeof(float) +
         (local_routes_.experts.capacity() + global_routes_.experts.capacity() + return_row_.capacity() +
          send_token_.capacity() + send_pair_.capacity() + token_home_.capacity() +
          recv_to_local_.capacity() + plan_.pair_expert.capacity() + plan_.pair_slot.capacity() +
          plan_.slot_pairs.capacity()) *
             sizeof(int32_t) +
         records_out_.capacity() + records_in_.capacity() + global_meta_.capacity() * sizeof(TokenMeta) +
         plan_.pair_status.capacity();
}

void ExpertParallelLayer::forward(const float* x, int num_tokens, std::span<const TokenMeta> meta, float* y,
                                  RoutingState* state, MoEStats* stats) {
  const int P = comm_.size(), me = comm_.rank(), E = num_experts(), k = top_k();
  const int R = router_->num_ranked();
  const size_t row_bytes = static_cast<size_t>(hidden_) * sizeof(float);
  step_ = ExpertParallelStepStats{};
  auto t0 = Clock::now();

  // 1. Local: validate, gate, route, pack the routing records. Errors are held back until every rank knows.
  std::string error;
  try {
    if (num_tokens < 0) fail("num_tokens must be >= 0 (got " + std::to_string(num_tokens) + ")");
    if (num_tokens > 0 && (x == nullptr || y == nullptr)) fail("x and y must not be null");
    if (static_cast<int64_t>(meta.size()) != num_tokens) {
      fail("token metadata has " + std::to_string(meta.size()) + " rows but x has " +
           std::to_string(num_tokens));
    }
    if (num_tokens > 0 && x < y + num_tokens * hidden_ && y < x + num_tokens * hidden_) {
      fail("y must not overlap x");
    }
    ensure_local(num_tokens);
    kernels::linear(config_.gate_kernel, x, num_tokens, hidden_, weights_->router_gate(), logits_.data(), E,
                    *pool_);
    add_router_bias(logits_.data(), num_tokens, E, weights_->router_bias());
    router_->route(logits_.data(), num_tokens, local_routes_);
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  if (error.empty()) {
    for (int t = 0; t < num_tokens; ++t) {
      std::byte* rec = records_out_.data() + static_cast<size_t>(t) * record_bytes_;
      std::memcpy(rec, &meta[t].request_id, 8);
      std::memcpy(rec + 8, &meta[t].position, 4);
      std::memcpy(rec + 12, &local_routes_.top1_score[t], 4);
      std::memcpy(rec + 16, &local_routes_.experts[static_cast<size_t>(t) * R], 4 * static_cast<size_t>(R));
      std::memcpy(rec + 16 + 4 * R, &local_routes_.weights[static_cast<size_t>(t) * R],
                  4 * static_cast<size_t>(R));
    }
  }
  step_.route_ms = ms_since(t0);
  t0 = Clock::now();

  // 2. Token counts (or a rejection) from every rank, then the routing records.
  comm_.all_gather_sizes(error.empty() ? static_cast<size_t>(num_tokens) : kRejected, counts_);
  const std::string rejected = rank_list(counts_, kRejected);
  if (!rejected.empty()) {
    if (!error.empty()) throw std::invalid_argument(error + " (rank " + std::to_string(me) + ")");
    throw std::invalid_argument("expert parallel layer: rank(s) " + rejected +
                                " rejected their input (see their messages); no rank ran the step");
  }
  token_offset_[0] = 0;
  for (int r = 0; r < P; ++r) {
    token_offset_[r + 1] = token_offset_[r] + static_cast<int64_t>(counts_[r]);
    record_bytes_per_rank_[r] = counts_[r] * record_bytes_;
  }
  const int64_t Tg = token_offset_[P];
  if (Tg > std::numeric_limits<int>::max() / std::max(k, 1)) {
    fail("the global batch (" + std::to_string(Tg) + " tokens) is too large");  // same on every rank
  }
  ensure_global(Tg);
  comm_.all_gather_v(records_out_.data(), record_bytes_per_rank_[me], records_in_.data(),
                     record_bytes_per_rank_);
  step_.local_tokens = num_tokens;
  step_.global_tokens = Tg;
  step_.metadata_bytes_sent = static_cast<int64_t>(record_bytes_per_rank_[me]);
  step_.metadata_bytes_received = Tg * static_cast<int64_t>(record_bytes_);
  step_.metadata_ms = ms_since(t0);
  t0 = Clock::now();

  // 3. The global plan, the same on every rank.
  global_routes_.resize(static_cast<int>(Tg), E, k, R);
  global_meta_.resize(static_cast<size_t>(Tg));
  for (int64_t t = 0; t < Tg; ++t) {
    const std::byte* rec = records_in_.data() + static_cast<size_t>(t) * record_bytes_;
    std::memcpy(&global_meta_[t].request_id, rec, 8);
    std::memcpy(&global_meta_[t].position, rec + 8, 4);
    std::memcpy(&global_routes_.top1_score[t], rec + 12, 4);
    std::memcpy(&global_routes_.experts[static_cast<size_t>(t) * R], rec + 16, 4 * static_cast<size_t>(R));
    std::memcpy(&global_routes_.weights[static_cast<size_t>(t) * R], rec + 16 + 4 * R,
                4 * static_cast<size_t>(R));
  }
  for (int r = 0; r < P; ++r) {
    for (int64_t t = token_offset_[r]; t < token_offset_[r + 1]; ++t) token_home_[t] = r;
  }
  // Throws the same std::invalid_argument on every rank for a batch it rejects (inputs are identical).
  // Without verify_plan, every rank trusts that its inputs equal the others' (they do unless the causal
  // states diverged), so a planner error is the same on every rank. With verify_plan, the planner's outcome
  // (plan hash, or a rejection) is compared across ranks, which also catches a rejection on some ranks only.
  std::string plan_error;
  try {
    planner_->plan(global_routes_, std::span<const TokenMeta>(global_meta_.data(), static_cast<size_t>(Tg)),
                   state, plan_);
  } catch (const std::invalid_argument& e) {
    if (!options_.verify_plan) throw;
    plan_error = e.what();
  }
  if (options_.verify_plan) {
    const size_t hash = std::min<size_t>(static_cast<size_t>(plan_hash(plan_)), kRejected - 1);
    comm_.all_gather_sizes(plan_error.empty() ? hash : kRejected, hash_gather_);
    const std::string rejecting = rank_list(hash_gather_, kRejected);
    int num_rejecting = 0;
    for (size_t h : hash_gather_) num_rejecting += h == kRejected;
    if (num_rejecting == P) throw std::invalid_argument(plan_error);  // the same error everywhere
    std::string differing;
    for (int r = 1; r < P; ++r) {
      if (hash_gather_[r] != hash_gather_[0])
        differing += (differing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (!differing.empty()) {
      throw std::runtime_error(
          "expert parallel layer: rank " + std::to_string(me) + " of " + std::to_string(P) +
          ": the dispatch plan of rank(s) " + differing + " differs from rank 0's" +
          (rejecting.empty() ? std::string() : " (rank(s) " + rejecting + " rejected the batch)") +
          "; the routing states have diverged" + (plan_error.empty() ? "" : ": " + plan_error));
    }
  }
  build_layout();
  step_.plan_ms = ms_since(t0);
  t0 = Clock::now();

  // 4. Dispatch: hidden rows of this rank's kept pairs to their experts' owners.
  const int64_t rows_out = send_row_offset_[P];
  const int64_t rows_in = recv_row_offset_[P];
  pool_->parallel_for(rows_out, [&](int64_t i, int) {
    const float* src = x + static_cast<int64_t>(send_token_[i]) * hidden_;
    if (config_.weight_on_input) {  // Llama 4: the expert's input is the row times the pair's weight
      scale_row(src, plan_.pair_weight[send_pair_[i]], hidden_, home_rows_.data() + i * hidden_);
    } else {
      std::memcpy(home_rows_.data() + i * hidden_, src, row_bytes);
    }
  });
  for (int r = 0; r < P; ++r) {
    send_bytes_[r] = static_cast<size_t>(send_rows_[r]) * row_bytes;
    recv_bytes_[r] = static_cast<size_t>(recv_rows_[r]) * row_bytes;
  }
  comm_.all_to_all_v(home_rows_.data(), send_bytes_, owner_rows_.data(), recv_bytes_);
  pool_->parallel_for(rows_in, [&](int64_t i, int) {
    std::memcpy(gathered_.data() + static_cast<int64_t>(recv_to_local_[i]) * hidden_,
                owner_rows_.data() + i * hidden_, row_bytes);
  });
  step_.rows_sent = rows_out;
  step_.rows_sent_remote = rows_out - send_rows_[me];
  step_.rows_computed = rows_in;
  step_.dispatch_ms = ms_since(t0);
  t0 = Clock::now();

  // 5. This rank's experts.
  run_experts();
  step_.experts_ms = ms_since(t0);
  t0 = Clock::now();

  // 6. Results back to the home ranks, in the order they came.
  pool_->parallel_for(rows_in, [&](int64_t i, int) {
    std::memcpy(owner_rows_.data() + i * hidden_,
                expert_out_.data() + static_cast<int64_t>(recv_to_local_[i]) * hidden_, row_bytes);
  });
  comm_.all_to_all_v(owner_rows_.data(), recv_bytes_, home_rows_.data(), send_bytes_);
  step_.return_ms = ms_since(t0);
  t0 = Clock::now();

  // 7. Shared expert on the local rows, then combine in fixed j order.
  if (has_shared_ && num_tokens > 0) {
    ffns_->run_shared(x, num_tokens, shared_out_.data(), scratch_.data(), *pool_);
    if (weights_->shared_gate()) {
      kernels::linear(config_.gate_kernel, x, num_tokens, hidden_, *weights_->shared_gate(),
                      shared_gate_logit_.data(), 1, *pool_);
    }
  }
  step_.shared_ms = ms_since(t0);
  t0 = Clock::now();
  const int64_t first_pair = token_offset_[me] * k;
  const bool gated = has_shared_ && weights_->shared_gate().has_value();
  pool_->parallel_for(num_tokens, [&](int64_t t, int) {
    const float* rows[MoELayerConfig::kMaxTopK];
    for (int j = 0; j < k; ++j) {
      const int32_t row = return_row_[t * k + j];
      rows[j] = row < 0 ? nullptr : home_rows_.data() + static_cast<int64_t>(row) * hidden_;
    }
    combine_row(k, &plan_.pair_status[first_pair + t * k],
                config_.weight_on_input ? nullptr : &plan_.pair_weight[first_pair + t * k], rows,
                has_shared_ ? shared_out_.data() + t * hidden_ : nullptr,
                gated ? shared_gate_scale(shared_gate_logit_[t]) : 1.0f, hidden_, y + t * hidden_);
  });
  step_.combine_ms = ms_since(t0);

  if (stats != nullptr) collect_stats(plan_, stats);
}

// NOTES: every rank walks the global slots in one order, ascending (expert, slot). A home rank packs its
// rows for owner o in that order; owner o receives rank h's block in that order too, so both sides agree
// on every row's place without exchanging indices. Results return in the order they were received, so the
// home rank finds pair (t, j)'s result at the same row index it sent it from.
void ExpertParallelLayer::build_layout() {
  const int P = comm_.size(), me = comm_.rank(), E = num_experts(), k = top_k();
  const int64_t my_first = token_offset_[me];
  const int64_t my_tokens = token_offset_[me + 1] - my_first;
  std::fill(send_rows_.begin(), send_rows_.end(), 0);
  std::fill(recv_rows_.begin(), recv_rows_.end(), 0);
  std::fill(local_rows_.begin(), local_rows_.end(), 0);
  // Pass 1: row counts. home_index_[h] = how many kept pairs at e of home h came before (the replica rule).
  for (int e = 0; e < E; ++e) {
    std::fill(home_index_.begin(), home_index_.end(), 0);
    for (int32_t g = plan_.expert_offsets[e]; g < plan_.expert_offsets[e + 1]; ++g) {
      const int home = token_home_[plan_.slot_pairs[g] / k];
      const int dest = placement_.replica_rank(e, home, home_index_[home]++);
      if (home == me) ++send_rows_[dest];
      if (dest == me) {
        ++recv_rows_[home];
        ++local_rows_[e];
      }
    }
  }
  send_row_offset_[0] = recv_row_offset_[0] = 0;
  for (int r = 0; r < P; ++r) {
    send_row_offset_[r + 1] = send_row_offset_[r] + send_rows_[r];
    recv_row_offset_[r + 1] = recv_row_offset_[r] + recv_rows_[r];
    cursor_[r] = send_row_offset_[r];
    cursor_[P + r] = recv_row_offset_[r];
  }
  int64_t base = 0;
  for (int e : local_experts_) {
    local_slot_base_[e] = base;
    base += local_rows_[e];
  }
  // Pass 2: every row's place. A rank's rows of expert e are e's slots it computes, in slot order.
  std::fill(return_row_.begin(), return_row_.begin() + my_tokens * k, -1);
  for (int e = 0; e < E; ++e) {
    std::fill(home_index_.begin(), home_index_.end(), 0);
    int64_t mine = 0;
    for (int32_t g = plan_.expert_offsets[e]; g < plan_.expert_offsets[e + 1]; ++g) {
      const int32_t pair = plan_.slot_pairs[g];
      const int32_t token = pair / k;
      const int home = token_home_[token];
      const int dest = placement_.replica_rank(e, home, home_index_[home]++);
      if (home == me) {
        const int64_t row = cursor_[dest]++;
        send_token_[row] = static_cast<int32_t>(token - my_first);
        send_pair_[row] = pair;
        return_row_[(token - my_first) * k + pair % k] = static_cast<int32_t>(row);
      }
      if (dest == me) {
        const int64_t row = cursor_[P + home]++;
        recv_to_local_[row] = static_cast<int32_t>(local_slot_base_[e] + mine++);
      }
    }
  }
}

void ExpertParallelLayer::run_experts() {
  active_experts_.clear();
  int64_t max_rows = 0;
  for (int e : local_experts_) {
    if (local_rows_[e] == 0) continue;
    active_experts_.push_back(e);
    max_rows = std::max<int64_t>(max_rows, local_rows_[e]);
  }
  auto run_expert = [&](int e, float* scratch) {
    const int64_t first = local_slot_base_[e];
    ffns_->run_expert(e, gathered_.data() + first * hidden_, local_rows_[e],
                      expert_out_.data() + first * hidden_, scratch, *pool_);
  };
  run_experts_scheduled(active_experts_, max_rows, *pool_, scratch_.data(), per_thread_scratch_, run_expert);
}

void ExpertParallelLayer::release_requests(std::span<const uint64_t> finished, RoutingState& state) {
  const int P = comm_.size();
  std::vector<size_t> counts(P), bytes(P);
  comm_.all_gather_sizes(finished.size(), counts);
  size_t total = 0;
  for (int r = 0; r < P; ++r) {
    bytes[r] = counts[r] * sizeof(uint64_t);
    total += counts[r];
  }
  std::vector<uint64_t> all(total);
  comm_.all_gather_v(finished.data(), finished.size() * sizeof(uint64_t), all.data(), bytes);
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  for (uint64_t id : all) {
    if (state.find(id) == nullptr) {
      fail("release_requests: the routing state does not hold request " + std::to_string(id) +
           "; no request was released");
    }
  }
  for (uint64_t id : all) state.release(id);
}

void ExpertParallelLayer::admit_requests(std::span<const Admission> admitted, RoutingState& state) {
  const int P = comm_.size();
  std::vector<size_t> counts(P), bytes(P);
  comm_.all_gather_sizes(admitted.size(), counts);
  size_t total = 0;
  for (int r = 0; r < P; ++r) {
    bytes[r] = counts[r] * 16;
    total += counts[r];
  }
  // 16-byte records: request id, prompt length, 4 bytes of padding (zero).
  std::vector<std::byte> mine(admitted.size() * 16), all(total * 16);
  for (size_t i = 0; i < admitted.size(); ++i) {
    std::memcpy(mine.data() + i * 16, &admitted[i].request_id, 8);
    std::memcpy(mine.data() + i * 16 + 8, &admitted[i].prompt_length, 4);
  }
  comm_.all_gather_v(mine.data(), mine.size(), all.data(), bytes);
  std::vector<Admission> requests(total);
  for (size_t i = 0; i < total; ++i) {
    std::memcpy(&requests[i].request_id, all.data() + i * 16, 8);
    std::memcpy(&requests[i].prompt_length, all.data() + i * 16 + 8, 4);
  }
  std::vector<uint64_t> ids(total);
  for (size_t i = 0; i < total; ++i) {
    const Admission& a = requests[i];
    if (a.prompt_length == 0) {
      fail("admit_requests: request " + std::to_string(a.request_id) +
           " has prompt length 0; no request was admitted");
    }
    if (state.find(a.request_id) != nullptr) {
      fail("admit_requests: request " + std::to_string(a.request_id) +
           " is already admitted (release it first); no request was admitted");
    }
    ids[i] = a.request_id;
  }
  std::sort(ids.begin(), ids.end());
  if (auto dup = std::adjacent_find(ids.begin(), ids.end()); dup != ids.end()) {
    fail("admit_requests: request " + std::to_string(*dup) +
         " is admitted twice in one call; no request was admitted");
  }
  for (const Admission& a : requests) state.admit(a.request_id, a.prompt_length);
}

namespace {

// Every rank's bytes, concatenated in rank order (a collective).
std::vector<uint8_t> all_gather_bytes(Communicator& comm, const std::vector<uint8_t>& mine) {
  const int P = comm.size();
  std::vector<size_t> sizes(P);
  comm.all_gather_sizes(mine.size(), sizes);
  size_t total = 0;
  for (size_t n : sizes) total += n;
  std::vector<uint8_t> all(total);
  comm.all_gather_v(mine.data(), mine.size(), all.data(), sizes);
  return all;
}

template <typename T>
void put_pod(std::vector<uint8_t>& out, const T& v) {
  const auto* b = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), b, b + sizeof(T));
}
template <typename T>
T get_pod(const std::vector<uint8_t>& in, size_t& at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  at += sizeof(T);
  return v;
}

// Throws on every rank alike when an id appears twice (ids sorted first).
void refuse_duplicates(std::vector<uint64_t> ids, const char* call, const char* what) {
  std::sort(ids.begin(), ids.end());
  if (auto dup = std::adjacent_find(ids.begin(), ids.end()); dup != ids.end()) {
    throw std::invalid_argument(std::string("ExpertParallelLayer: ") + call + ": request " +
                                std::to_string(*dup) + " is " + what + " twice in one call; nothing was " +
                                what);
  }
}

}  // namespace

void ExpertParallelLayer::restore_requests(std::span<const Restoration> restored, RoutingState& state) {
  // Per request: id, prompt length, segment count, then each segment's byte length and bytes.
  std::vector<uint8_t> mine;
  for (const Restoration& r : restored) {
    put_pod(mine, r.request_id);
    put_pod(mine, r.prompt_length);
    put_pod(mine, static_cast<uint64_t>(r.prefix.size()));
    for (const RoutingSegment& s : r.prefix) {
      const std::vector<uint8_t> bytes = s.serialize();
      put_pod(mine, static_cast<uint64_t>(bytes.size()));
      mine.insert(mine.end(), bytes.begin(), bytes.end());
    }
  }
  const std::vector<uint8_t> all = all_gather_bytes(comm_, mine);
  std::vector<Restoration> requests;
  std::vector<uint64_t> ids;
  for (size_t at = 0; at < all.size();) {
    Restoration r;
    r.request_id = get_pod<uint64_t>(all, at);
    r.prompt_length = get_pod<uint32_t>(all, at);
    const uint64_t n = get_pod<uint64_t>(all, at);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t len = get_pod<uint64_t>(all, at);
      r.prefix.push_back(RoutingSegment::parse(std::span<const uint8_t>(all.data() + at, len)));
      at += len;
    }
    ids.push_back(r.request_id);
    requests.push_back(std::move(r));
  }
  refuse_duplicates(ids, "restore_requests", "restored");
  for (const Restoration& r : requests) state.check_restore(r.request_id, r.prompt_length, r.prefix);
  for (const Restoration& r : requests) state.restore(r.request_id, r.prompt_length, r.prefix);
}

void ExpertParallelLayer::rollback_requests(std::span<const Rollback> rollbacks, RoutingState& state) {
  std::vector<uint8_t> mine;
  for (const Rollback& r : rollbacks) {
    put_pod(mine, r.request_id);
    put_pod(mine, r.position);
  }
  const std::vector<uint8_t> all = all_gather_bytes(comm_, mine);
  std::vector<Rollback> requests;
  std::vector<uint64_t> ids;
  for (size_t at = 0; at < all.size();) {
    Rollback r;
    r.request_id = get_pod<uint64_t>(all, at);
    r.position = get_pod<uint32_t>(all, at);
    ids.push_back(r.request_id);
    requests.push_back(r);
  }
  refuse_duplicates(ids, "rollback_requests", "rolled back");
  for (const Rollback& r : requests) state.check_rollback(r.request_id, r.position);
  for (const Rollback& r : requests) state.rollback(r.request_id, r.position);
}

Fingerprint ExpertParallelLayer::fingerprint() const {
  Fingerprint f = layer_fingerprint(config_, *weights_, "cpu (" + comm_.name() + ")", config_.num_threads);
  f.world_size = comm_.size();
  return f;
}

}  // namespace moe::parallel
