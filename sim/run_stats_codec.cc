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
static_assert(sizeof(RunStats) == 8 * 7 + 2 * sizeof(std::vector<int64_t>) + 8 * 2 + 8 * 9 + 8 +
                                      sizeof(RoutingStats) + sizeof(serving::EngineStats) +
                                      sizeof(RoutingRule),
              "RunStats changed: encode its new fields in run_stats_codec.cc");

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_vector(std::string& out, const std::vector<int64_t>& v) {
  put<uint64_t>(out, v.size());
  for (int64_t x : v) put(out, x);
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

  std::vector<int64_t> get_vector() {
    const uint64_t n = get<uint64_t>();
    if (n > (bytes_.size() - offset_) / sizeof(int64_t)) {
      throw DataError("point statistics: a vector of " + std::to_string(n) + " values does not fit in the " +
                      std::to_string(bytes_.size() - offset_) + " bytes left");
    }
    std::vector<int64_t> v(n);
    for (auto& x : v) x = get<int64_t>();
    return v;
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
  put(out, static_cast<int32_t>(s.cache_rule.scope));
  put(out, s.cache_rule.lookahead);
  put(out, s.cache_rule.fingerprint);
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
  const int32_t scope = in.get<int32_t>();
  if (scope < static_cast<int32_t>(CapacityScope::kBatch) ||
      scope > static_cast<int32_t>(CapacityScope::kPrefix)) {
    throw DataError("point statistics: cache rule scope " + std::to_string(scope) + " is not a scope");
  }
  s.cache_rule.scope = static_cast<CapacityScope>(scope);
  s.cache_rule.lookahead = in.get<uint32_t>();
  s.cache_rule.fingerprint = in.get<uint64_t>();
  return s;
}

}  // namespace moe::sim
