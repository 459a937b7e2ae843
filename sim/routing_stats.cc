#include "sim/routing_stats.h"

#include <algorithm>

namespace moe::sim {

RoutingStatsCounter::RoutingStatsCounter(int num_experts, int top_k)
    : num_experts_(num_experts), top_k_(top_k), choices_(num_experts, 0) {}

void RoutingStatsCounter::pair(const Last& prev, const Last& next) {
  ++consecutive_;
  if (prev.first >= 0 && prev.first == next.first) ++same_first_;
  if (top_k_ < 2) {
    if (prev.first >= 0 && prev.first == next.first) ++same_either_;
    return;
  }
  const auto in_next = [&](int32_t e) { return e >= 0 && (e == next.first || e == next.second); };
  if (in_next(prev.first) || in_next(prev.second)) ++same_either_;
}

void RoutingStatsCounter::add(std::span<const TokenMeta> rows, const TokenRoutes& routes) {
  const int k = top_k_;
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t t = static_cast<int64_t>(i);
    for (int r = 0; r < k; ++r) {
      const int32_t e = routes.expert(t, r);
      if (e >= 0) ++choices_[e];
    }
    const Last cur{rows[i].position, routes.expert(t, 0), k >= 2 ? routes.expert(t, 1) : -1};
    const uint64_t id = rows[i].request_id;
    if (i > 0 && rows[i - 1].request_id == id) {
      if (rows[i - 1].position + 1 == cur.position) {
        pair(Last{rows[i - 1].position, routes.expert(t - 1, 0), k >= 2 ? routes.expert(t - 1, 1) : -1}, cur);
      }
    } else {
      const auto it = last_.find(id);
      if (it != last_.end() && it->second.position + 1 == cur.position) pair(it->second, cur);
    }
    if (i + 1 == rows.size() || rows[i + 1].request_id != id) last_[id] = cur;
  }
  tokens_ += static_cast<int64_t>(rows.size());
}

void RoutingStatsCounter::release(uint64_t request_id) {
  last_.erase(request_id);
}

RoutingStats RoutingStatsCounter::result() const {
  RoutingStats s;
  s.tokens = tokens_;
  s.choices = choices_;
  for (int64_t c : choices_) s.pairs += c;
  if (s.pairs > 0) {
    const auto [lo, hi] = std::minmax_element(choices_.begin(), choices_.end());
    s.share_min = static_cast<double>(*lo) / static_cast<double>(s.pairs);
    s.share_max = static_cast<double>(*hi) / static_cast<double>(s.pairs);
    s.load_imbalance = s.share_max * num_experts_;
  }
  s.consecutive = consecutive_;
  if (consecutive_ > 0) {
    s.same_first = static_cast<double>(same_first_) / static_cast<double>(consecutive_);
    s.same_first_or_second = static_cast<double>(same_either_) / static_cast<double>(consecutive_);
  }
  return s;
}

}  // namespace moe::sim
