#include "moe/parallel/expert_parallel_layer.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>

#include "base/splitmix64.h"
#include "kernels/cpu/linear.h"
#include "moe/layer/combine.h"
#include "moe/layer/expert_ffns.h"
#include "moe/layer/expert_schedule.h"
#include "moe/parallel/ep_internal.h"
#include "router/rules/slice_rules.h"

namespace moe::parallel {

using namespace ep_detail;

namespace {

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

std::string_view to_string(EpPlanning p) {
  return p == EpPlanning::kHome ? "home" : "global";
}

EpPlanning parse_ep_planning(std::string_view s) {
  if (s == "global") return EpPlanning::kGlobal;
  if (s == "home") return EpPlanning::kHome;
  throw std::invalid_argument("expert parallel planning '" + std::string(s) +
                              "' is not one of: global, home");
}

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
  init(std::move(config), nullptr, std::move(placement));
}

ExpertParallelLayer::ExpertParallelLayer(MoELayerConfig config, const io::LayerPartReader& read,
                                         Communicator& comm, std::optional<ExpertPlacement> placement,
                                         ExpertParallelOptions options)
    : comm_(comm), placement_(ExpertPlacement::contiguous(1, 1)), options_(options) {
  init(std::move(config), &read, std::move(placement));
}

std::unique_ptr<ExpertParallelLayer> ExpertParallelLayer::from_pretrained(
    const std::filesystem::path& dir, int layer_index, std::string_view preset, Communicator& comm,
    std::optional<ExpertPlacement> placement, ExpertParallelOptions options,
    std::optional<kernels::DType> storage) {
  // Opening the directory may fail on some ranks only (another host's copy): agreed before the constructor.
  std::optional<io::Pretrained> p;
  MoELayerConfig config;
  std::exception_ptr error;
  try {
    p = io::open_pretrained(dir);
    config = MoELayerConfig::pretrained(preset, p->config);
  } catch (...) {
    error = std::current_exception();
  }
  std::vector<size_t> outcome(comm.size());
  comm.all_gather_sizes(error ? 1 : 0, outcome);
  if (error) std::rethrow_exception(error);
  const std::string failing = rank_list(outcome, 1);
  if (!failing.empty()) {
    fail("rank(s) " + failing + " could not open " + dir.string() + " (see their messages)");
  }
  return std::make_unique<ExpertParallelLayer>(
      config, io::pretrained_part_reader(std::move(*p), layer_index, storage), comm, std::move(placement),
      options);
}

void ExpertParallelLayer::init(MoELayerConfig config, const io::LayerPartReader* read,
                               std::optional<ExpertPlacement> placement) {
  const int P = comm_.size(), me = comm_.rank();
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

  // Local validation first (and reading this rank's part); its outcome is agreed collectively so that a rank
  // with a bad configuration makes every rank fail at once instead of leaving the others waiting in the
  // consistency checks.
  std::string error;
  std::exception_ptr error_ptr;
  try {
    if (comm_.memory_space() != MemorySpace::kHost) {
      fail("the communicator '" + comm_.name() + "' works on " +
           std::string(to_string(comm_.memory_space())) +
           " memory; this CPU layer needs a host-memory communicator (single, mpi, or nccl through "
           "HostStagedCommunicator)");
    }
    const auto check_placement = [&](const ExpertPlacement& pl, int E) {
      if (pl.num_experts() != E) {
        fail("the placement maps " + std::to_string(pl.num_experts()) + " experts but the layer has " +
             std::to_string(E));
      }
      if (pl.world_size() != P) {
        fail("the placement is for " + std::to_string(pl.world_size()) + " ranks but the communicator has " +
             std::to_string(P));
      }
    };
    if (read != nullptr) {  // this rank's part, for the placement's experts of this rank
      config.validate();
      placement_ = placement ? *placement : ExpertPlacement::contiguous(config.router.num_experts, P);
      check_placement(placement_, config.router.num_experts);
      weights_ =
          std::make_shared<const io::LayerWeights>((*read)(io::ExpertSet::only(placement_.experts_of(me))));
    }
    if (!weights_) fail("weights must not be null");
    config_ = config.fitted_to(*weights_);
    const int E = config_.router.num_experts;
    if (read == nullptr) placement_ = placement ? *placement : ExpertPlacement::contiguous(E, P);
    check_placement(placement_, E);
    hidden_ = weights_->shape().hidden;
    local_experts_ = placement_.experts_of(me);
    for (int e : local_experts_) {
      if (!weights_->holds_expert(e)) {
        fail("the weights hold experts " + weights_->held().describe() + " but the placement gives rank " +
             std::to_string(me) + " expert " + std::to_string(e) + " (" + placement_.describe() + ")");
      }
    }
    ffns_ = std::make_unique<ExpertFfns>(config_, *weights_, local_experts_);
    has_shared_ = ffns_->has_shared();
    pool_.emplace(config_.num_threads);
    planner_.emplace(E, config_.router.top_k, config_.policy);
    router_.emplace(config_.router, planner_->num_ranked_needed());
    record_bytes_ = kRecordHeaderBytes + 8 * static_cast<size_t>(router_->num_ranked());
    const bool sliceable = rules::plans_in_slices(config_.policy);
    home_ = options_.planning == EpPlanning::kHome &&
            (config_.policy.scope != CapacityScope::kBatch || sliceable);
    home_slices_ = home_ && config_.policy.scope == CapacityScope::kBatch;
  } catch (const std::exception& e) {
    error = e.what();
    error_ptr = std::current_exception();
  }
  comm_.all_gather_sizes(error.empty() ? 0 : 1, hash_gather_);
  const std::string failing = rank_list(hash_gather_, 1);
  if (!failing.empty()) {
    if (!error.empty()) {
      try {
        std::rethrow_exception(error_ptr);
      } catch (const std::invalid_argument&) {
        throw std::invalid_argument(error + " (rank " + std::to_string(me) + ")");
      }
    }
    fail("rank(s) " + failing + " rejected the layer's configuration (see their messages)");
  }

  comm_.check_consistent(config_.config_hash(), "layer config (experts/k/policy/kernels)");
  comm_.check_consistent(weights_->replicated_hash(), "layer weights");
  comm_.check_consistent(placement_.hash(), "expert placement");
  comm_.check_consistent(static_cast<uint64_t>(options_.planning), "expert parallel planning (global/home)");
  check_weights_across_ranks();
  ffns_->release_mapped_sources();  // hashed: the quantized experts' mapped blocks are not read again

  const int E = num_experts(), k = top_k();
  active_experts_.reserve(local_experts_.size());
  local_slot_base_.assign(E, -1);
  local_rows_.assign(E, 0);
  home_index_.assign(P, 0);
  if (home_) {
    // The exchange layouts of kHome, fixed by the placement.
    held_begin_.assign(P + 1, 0);
    held_index_.assign(static_cast<size_t>(P) * E, -1);
    held_expert_.clear();
    primary_begin_.assign(P + 1, 0);
    primary_expert_.clear();
    for (int o = 0; o < P; ++o) {
      for (int e : placement_.experts_of(o)) {
        held_index_[static_cast<size_t>(o) * E + e] =
            static_cast<int32_t>(held_expert_.size()) - held_begin_[o];
        held_expert_.push_back(e);
      }
      held_begin_[o + 1] = static_cast<int32_t>(held_expert_.size());
      for (int e = 0; e < E; ++e) {
        if (placement_.owner(e) == o) primary_expert_.push_back(e);
      }
      primary_begin_[o + 1] = static_cast<int32_t>(primary_expert_.size());
    }
    const size_t mine = local_experts_.size();
    row_count_out_.assign(held_expert_.size(), 0);
    row_count_in_.assign(static_cast<size_t>(P) * mine, 0);
    count_send_bytes_.resize(P);
    count_recv_bytes_.resize(P);
    claim_send_bytes_.resize(P);
    claim_recv_bytes_.resize(P);
    const size_t my_primary = static_cast<size_t>(primary_begin_[me + 1] - primary_begin_[me]);
    for (int o = 0; o < P; ++o) {
      count_send_bytes_[o] = static_cast<size_t>(held_begin_[o + 1] - held_begin_[o]) * sizeof(int32_t);
      count_recv_bytes_[o] = mine * sizeof(int32_t);
      claim_send_bytes_[o] =
          static_cast<size_t>(primary_begin_[o + 1] - primary_begin_[o]) * k * sizeof(int64_t);
      claim_recv_bytes_[o] = my_primary * k * sizeof(int64_t);
    }
    claims_local_.assign(static_cast<size_t>(k) * E, 0);
    claims_before_.assign(static_cast<size_t>(k) * E, 0);
    claims_out_.assign(static_cast<size_t>(k) * E, 0);
    claims_in_.assign(static_cast<size_t>(P) * my_primary * k, 0);
    scan_.assign(claims_in_.size(), 0);
    expert_claims_.assign(static_cast<size_t>(P) * k, 0);
    expert_before_.assign(static_cast<size_t>(P) * k, 0);
    home_rows_to_.assign(static_cast<size_t>(P) * E, 0);
    ensure_local(config_.max_tokens);
    // Rows this rank's experts compute under uniform routing (grown when a step needs more).
    ensure_owner(
        std::max<int64_t>(1, (int64_t{config_.max_tokens} * P * k * static_cast<int64_t>(mine) + E - 1) / E));
  } else {
    ensure_local(config_.max_tokens);
    ensure_global(static_cast<int64_t>(config_.max_tokens) * P);
  }
}

void ExpertParallelLayer::check_weights_across_ranks() {
  // Every rank's (expert, hash) pairs for the experts it holds; replicas must agree.
  const int P = comm_.size(), me = comm_.rank(), E = num_experts();
  std::vector<uint64_t> mine;
  for (int e : local_experts_) {
    mine.push_back(static_cast<uint64_t>(e));
    mine.push_back(weights_->expert_hash(e));
  }
  std::vector<size_t> sizes(P);
  comm_.all_gather_sizes(mine.size() * sizeof(uint64_t), sizes);
  size_t total = 0;
  for (size_t n : sizes) total += n;
  std::vector<uint64_t> all(total / sizeof(uint64_t));
  comm_.all_gather_v(mine.data(), mine.size() * sizeof(uint64_t), all.data(), sizes);
  std::vector<uint64_t> hash(E, 0);
  std::vector<int> first_rank(E, -1);
  std::string differing;
  size_t at = 0;
  for (int r = 0; r < P; ++r) {
    for (size_t i = 0; i < sizes[r] / (2 * sizeof(uint64_t)); ++i, at += 2) {
      const int e = static_cast<int>(all[at]);
      const uint64_t h = all[at + 1];
      if (e < 0 || e >= E) fail("rank " + std::to_string(r) + " reported expert " + std::to_string(e));
      if (first_rank[e] < 0) {
        first_rank[e] = r;
        hash[e] = h;
      } else if (hash[e] != h) {
        char buf[128];
        std::snprintf(buf, sizeof buf, "expert %d on rank %d (0x%016llx) and rank %d (0x%016llx)", e,
                      first_rank[e], static_cast<unsigned long long>(hash[e]), r,
                      static_cast<unsigned long long>(h));
        differing += (differing.empty() ? "" : ", ") + std::string(buf);
      }
    }
  }
  if (!differing.empty()) {
    throw std::runtime_error("expert parallel layer: rank " + std::to_string(me) + " of " +
                             std::to_string(P) +
                             ": layer weights differ across the replicas of an expert: " + differing);
  }
  for (int e = 0; e < E; ++e) {
    if (first_rank[e] < 0) fail("no rank holds expert " + std::to_string(e));  // the same on every rank
  }
  weights_hash_ = io::sharded_hash(weights_->replicated_hash(), hash);
}

ExpertParallelLayer::~ExpertParallelLayer() = default;

void ExpertParallelLayer::ensure_local(int num_tokens) {
  if (num_tokens <= local_capacity_) return;
  const int E = num_experts(), k = top_k();
  const size_t T = static_cast<size_t>(num_tokens);
  logits_.resize(T * E);
  local_routes_.resize(num_tokens, E, k, router_->num_ranked());
  if (!home_) records_out_.resize(T * record_bytes_);
  return_row_.resize(T * k);
  send_token_.resize(T * k);
  send_pair_.resize(T * k);
  home_rows_.resize(T * k * hidden_);
  if (has_shared_) {
    shared_out_.resize(T * hidden_);
    shared_gate_logit_.resize(T);
    grow(scratch_, ffns_->shared_scratch_floats(num_tokens));
  }
  if (home_) {
    planner_->reserve(num_tokens);
    plan_.reserve(num_tokens, k, E);
    if (options_.verify_plan) row_ids_out_.resize(T);
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
  // The rows this rank's experts can receive: each held expert holds at most one pair per token.
  ensure_owner(global_tokens * std::min<int64_t>(k, static_cast<int64_t>(local_experts_.size())));
  global_capacity_ = global_tokens;
}

void ExpertParallelLayer::ensure_owner(int64_t rows) {
  if (static_cast<int64_t>(recv_to_local_.size()) >= rows) return;
  // Geometric growth: the rows a rank computes vary from step to step (kHome sizes them as they come).
  const size_t n = std::max(static_cast<size_t>(rows), recv_to_local_.size() * 3 / 2);
  recv_to_local_.resize(n);
  owner_rows_.resize(n * hidden_);
  gathered_.resize(n * hidden_);
  expert_out_.resize(n * hidden_);
  if (!local_experts_.empty()) {
    per_thread_scratch_ =
        ffns_->expert_scratch_floats(std::min<int64_t>(static_cast<int64_t>(n), kSmallExpertRows));
    grow(scratch_, std::max(ffns_->expert_scratch_floats(static_cast<int64_t>(n)),
                            per_thread_scratch_ * static_cast<size_t>(config_.num_threads)));
  }
}

size_t ExpertParallelLayer::workspace_bytes() const {
  const auto bytes = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
  return bytes(logits_) + bytes(home_rows_) + bytes(shared_out_) + bytes(shared_gate_logit_) +
         bytes(owner_rows_) + bytes(gathered_) + bytes(expert_out_) + bytes(scratch_) +
         bytes(local_routes_.weights) + bytes(local_routes_.top1_score) + bytes(global_routes_.weights) +
         bytes(global_routes_.top1_score) + bytes(plan_.pair_weight) + bytes(local_routes_.experts) +
         bytes(global_routes_.experts) + bytes(return_row_) + bytes(send_token_) + bytes(send_pair_) +
         bytes(token_home_) + bytes(recv_to_local_) + bytes(plan_.pair_expert) + bytes(plan_.pair_slot) +
         bytes(plan_.slot_pairs) + bytes(records_out_) + bytes(records_in_) + bytes(global_meta_) +
         bytes(plan_.pair_status) + bytes(row_count_out_) + bytes(row_count_in_) + bytes(claims_in_) +
         bytes(scan_) + bytes(home_rows_to_);
}

void ExpertParallelLayer::forward(const float* x, int num_tokens, std::span<const TokenMeta> meta, float* y,
                                  RoutingState* state, MoEStats* stats) {
  const int P = comm_.size(), me = comm_.rank(), k = top_k();
  const size_t row_bytes = static_cast<size_t>(hidden_) * sizeof(float);
  step_ = ExpertParallelStepStats{};
  step_.planned_locally = home_;
  auto t0 = Clock::now();

  // 1. Local: validate, gate, route (and under kHome the planner's checks of this rank's rows). Errors are
  // held back until every rank knows.
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
    kernels::linear(config_.gate_kernel, x, num_tokens, hidden_, weights_->router_gate(), logits_.data(),
                    num_experts(), *pool_);
    add_router_bias(logits_.data(), num_tokens, num_experts(), weights_->router_bias());
    router_->route(logits_.data(), num_tokens, local_routes_);
    if (home_ && !home_slices_) planner_->check(local_routes_, meta, state);
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  step_.route_ms = ms_since(t0);
  t0 = Clock::now();

  // 2. Token counts (or a rejection) from every rank.
  comm_.all_gather_sizes(error.empty() ? static_cast<size_t>(num_tokens) : kRejected, counts_);
  const std::string rejected = rank_list(counts_, kRejected);
  if (!rejected.empty()) {
    if (!error.empty()) throw std::invalid_argument(error + " (rank " + std::to_string(me) + ")");
    fail("rank(s) " + rejected + " rejected their input (see their messages); no rank ran the step");
  }
  token_offset_[0] = 0;
  for (int r = 0; r < P; ++r) token_offset_[r + 1] = token_offset_[r] + static_cast<int64_t>(counts_[r]);
  const int64_t Tg = token_offset_[P];
  if (Tg > std::numeric_limits<int>::max() / std::max(k, 1)) {
    fail("the global batch (" + std::to_string(Tg) + " tokens) is too large");  // same on every rank
  }
  step_.local_tokens = num_tokens;
  step_.global_tokens = Tg;
  step_.size_bytes_sent = sizeof(size_t);
  step_.size_bytes_received = static_cast<int64_t>(P * sizeof(size_t));

  // 3. The plan and the exchange's layout (metadata_ms and plan_ms are timed inside).
  if (home_) {
    plan_home(meta, state);
  } else {
    plan_global(meta, state);
  }
  t0 = Clock::now();

  // 4. Dispatch: hidden rows of this rank's kept pairs to the ranks computing them.
  const int64_t rows_out = send_row_offset_[P];
  const int64_t rows_in = recv_row_offset_[P];
  ensure_owner(rows_in);
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
  // This rank's first pair in plan_: its rows' pairs come first in a local plan.
  const int64_t first_pair = home_ ? 0 : token_offset_[me] * k;
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

Fingerprint ExpertParallelLayer::fingerprint() const {
  Fingerprint f = layer_fingerprint(config_, *weights_, "cpu (" + comm_.name() + ")", config_.num_threads);
  f.world_size = comm_.size();
  f.weights_hash = weights_hash_;
  return f;
}

}  // namespace moe::parallel
