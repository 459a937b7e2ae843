#include "sim/run_stats_codec.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "sim/errors.h"

namespace moe::sim {
namespace {

// A new field of RunStats or RoutingStats must be encoded and decoded below; these sizes fail the build
// until it is (update them with the codec).
static_assert(sizeof(RoutingStats) == 8 * 2 + sizeof(std::vector<int64_t>) + 8 * 3 + 8 + 8 * 2,
              "RoutingStats changed: encode its new fields in run_stats_codec.cc");
static_assert(sizeof(serving::EngineStats) == 8 * 10,
              "EngineStats changed: encode its new fields in run_stats_codec.cc");
static_assert(sizeof(RoutingRule) == 4 + 4 + 8,
              "RoutingRule changed: encode its new fields in run_stats_codec.cc");
static_assert(sizeof(deploy::DeployStats) ==
                  8 * 4 + sizeof(std::vector<std::vector<int>>) + 8 * 8 + 7 * sizeof(std::vector<int64_t>) +
                      sizeof(std::vector<double>) + 3 * sizeof(deploy::StepRatio) + 8 * 2 + 8 * 6,
              "DeployStats changed: encode its new fields in run_stats_codec.cc");
static_assert(sizeof(RunStats) == 8 * 7 + 2 * sizeof(std::vector<int64_t>) + 8 * 2 + 8 * 9 + 8 +
                                      sizeof(RoutingStats) + sizeof(serving::EngineStats) +
                                      sizeof(std::vector<RoutingRule>) + sizeof(deploy::DeployStats),
              "RunStats changed: encode its new fields in run_stats_codec.cc");

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

template <typename T>
void put_vector(std::string& out, const std::vector<T>& v) {
  put<uint64_t>(out, v.size());
  for (T x : v) put(out, x);
}

// The deployment's statistics (present when enabled).
void put_deploy(std::string& out, const deploy::DeployStats& d) {
  put<uint8_t>(out, d.enabled ? 1 : 0);
  if (!d.enabled) return;
  for (int64_t v : {d.ranks_per_node, d.dispatch_row_bytes, d.combine_row_bytes, d.warmup_steps, d.steps,
                    d.tokens, d.pairs, d.expert_dropped, d.rank_dropped, d.computed, d.rank_capacity,
                    d.max_nvlink_send, d.max_rdma_send}) {
    put(out, v);
  }
  put<uint64_t>(out, d.replicas.size());
  for (const std::vector<int>& r : d.replicas) put_vector(out, r);
  for (const std::vector<int64_t>* v : {&d.rank_tokens, &d.rank_rows, &d.rank_local, &d.rank_nvlink_send,
                                        &d.rank_nvlink_recv, &d.rank_rdma_send, &d.rank_rdma_recv}) {
    put_vector(out, *v);
  }
  put_vector(out, d.rank_gemm_s);
  for (const deploy::StepRatio* r : {&d.token_balance, &d.rank_balance, &d.node_balance}) {
    put(out, r->mean);
    put(out, r->max);
  }
  for (double v : {d.dispatch_s, d.gemm_s, d.combine_s, d.step_s, d.step_max_s, d.gemm_mean_s}) put(out, v);
}

class Reader {
 public:
  Reader(std::string_view bytes, size_t& offset) : bytes_(bytes), offset_(offset) {}

  template <typename T>
  T get() {
    if (offset_ > bytes_.size() || bytes_.size() - offset_ < sizeof(T)) {
      throw DataError("point statistics: the encoded bytes end early (" + std::to_string(bytes_.size()) +
                      " bytes, reading at " + std::to_string(offset_) + ")");
    }
    T v;
    std::memcpy(&v, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return v;
  }

  template <typename T = int64_t>
  std::vector<T> get_vector() {
    const uint64_t n = get<uint64_t>();
    if (n > (bytes_.size() - offset_) / sizeof(T)) {
      throw DataError("point statistics: a vector of " + std::to_string(n) + " values does not fit in the " +
                      std::to_string(bytes_.size() - offset_) + " bytes left");
    }
    std::vector<T> v(n);
    for (auto& x : v) x = get<T>();
    return v;
  }

  deploy::DeployStats get_deploy() {
    deploy::DeployStats d;
    d.enabled = get<uint8_t>() != 0;
    if (!d.enabled) return d;
    for (int64_t* v : {&d.ranks_per_node, &d.dispatch_row_bytes, &d.combine_row_bytes, &d.warmup_steps,
                       &d.steps, &d.tokens, &d.pairs, &d.expert_dropped, &d.rank_dropped, &d.computed,
                       &d.rank_capacity, &d.max_nvlink_send, &d.max_rdma_send}) {
      *v = get<int64_t>();
    }
    const uint64_t experts = get<uint64_t>();
    if (experts > bytes_.size() - offset_) {
      throw DataError("point statistics: " + std::to_string(experts) +
                      " experts' replicas do not fit in the bytes");
    }
    d.replicas.resize(experts);
    for (std::vector<int>& r : d.replicas) r = get_vector<int>();
    for (std::vector<int64_t>* v : {&d.rank_tokens, &d.rank_rows, &d.rank_local, &d.rank_nvlink_send,
                                    &d.rank_nvlink_recv, &d.rank_rdma_send, &d.rank_rdma_recv}) {
      *v = get_vector();
    }
    d.rank_gemm_s = get_vector<double>();
    for (deploy::StepRatio* r : {&d.token_balance, &d.rank_balance, &d.node_balance}) {
      r->mean = get<double>();
      r->max = get<double>();
    }
    for (double* v : {&d.dispatch_s, &d.gemm_s, &d.combine_s, &d.step_s, &d.step_max_s, &d.gemm_mean_s}) {
      *v = get<double>();
    }
    return d;
  }

 private:
  std::string_view bytes_;
  size_t& offset_;
};

}  // namespace

void encode_run_stats(const RunStats& s, std::string& out) {
  for (int64_t v : {s.steps, s.tokens, s.pairs, s.kept, s.rerouted, s.dropped, s.tokens_fully_dropped})
    put(out, v);
  put_vector(out, s.expert_load);
  put_vector(out, s.expert_capacity);
  for (double v : {s.drop_rate, s.load_imbalance, s.step_drop_rate_mean, s.step_drop_rate_max,
                   s.step_imbalance_mean, s.step_imbalance_max, s.step_capacity_min, s.step_capacity_mean,
                   s.step_capacity_max, s.step_peak_load_mean, s.step_peak_load_max}) {
    put(out, v);
  }
  put(out, s.peak_live_requests);
  const RoutingStats& r = s.routing;
  put(out, r.tokens);
  put(out, r.pairs);
  put_vector(out, r.choices);
  for (double v : {r.share_min, r.share_max, r.load_imbalance}) put(out, v);
  put(out, r.consecutive);
  put(out, r.same_first);
  put(out, r.same_first_or_second);
  const serving::EngineStats& e = s.engine;
  for (int64_t v : {e.steps, e.rows, e.prompt_tokens, e.cached_prompt_tokens, e.cached_tokens, e.preemptions,
                    e.drafted, e.accepted, e.evictions, e.peak_blocks_used}) {
    put(out, v);
  }
  put(out, static_cast<int64_t>(s.cache_rules.size()));
  for (const RoutingRule& rule : s.cache_rules) {
    put(out, static_cast<int32_t>(rule.scope));
    put(out, rule.lookahead);
    put(out, rule.fingerprint);
  }
  put_deploy(out, s.deploy);
}

RunStats decode_run_stats(std::string_view bytes, size_t& offset) {
  Reader in(bytes, offset);
  RunStats s;
  for (int64_t* v :
       {&s.steps, &s.tokens, &s.pairs, &s.kept, &s.rerouted, &s.dropped, &s.tokens_fully_dropped})
    *v = in.get<int64_t>();
  s.expert_load = in.get_vector();
  s.expert_capacity = in.get_vector();
  for (double* v :
       {&s.drop_rate, &s.load_imbalance, &s.step_drop_rate_mean, &s.step_drop_rate_max,
        &s.step_imbalance_mean, &s.step_imbalance_max, &s.step_capacity_min, &s.step_capacity_mean,
        &s.step_capacity_max, &s.step_peak_load_mean, &s.step_peak_load_max}) {
    *v = in.get<double>();
  }
  s.peak_live_requests = in.get<int64_t>();
  RoutingStats& r = s.routing;
  r.tokens = in.get<int64_t>();
  r.pairs = in.get<int64_t>();
  r.choices = in.get_vector();
  for (double* v : {&r.share_min, &r.share_max, &r.load_imbalance}) *v = in.get<double>();
  r.consecutive = in.get<int64_t>();
  r.same_first = in.get<double>();
  r.same_first_or_second = in.get<double>();
  serving::EngineStats& e = s.engine;
  for (int64_t* v : {&e.steps, &e.rows, &e.prompt_tokens, &e.cached_prompt_tokens, &e.cached_tokens,
                     &e.preemptions, &e.drafted, &e.accepted, &e.evictions, &e.peak_blocks_used}) {
    *v = in.get<int64_t>();
  }
  const int64_t num_rules = in.get<int64_t>();
  if (num_rules < 0 || num_rules > 1 << 16) {
    throw DataError("point statistics: " + std::to_string(num_rules) + " cache rules is not a count");
  }
  for (int64_t i = 0; i < num_rules; ++i) {
    RoutingRule rule;
    const int32_t scope = in.get<int32_t>();
    if (scope < static_cast<int32_t>(CapacityScope::kBatch) ||
        scope > static_cast<int32_t>(CapacityScope::kPrefix)) {
      throw DataError("point statistics: cache rule scope " + std::to_string(scope) + " is not a scope");
    }
    rule.scope = static_cast<CapacityScope>(scope);
    rule.lookahead = in.get<uint32_t>();
    rule.fingerprint = in.get<uint64_t>();
    s.cache_rules.push_back(rule);
  }
  s.deploy = in.get_deploy();
  return s;
}

}  // namespace moe::sim
