#include "sim/routing_stats.h"

#include <algorithm>

namespace moe::sim {
namespace {

int bit(bool b) {  // & and | on 0/1 ints: no short-circuit branch
  return static_cast<int>(b);
}

// What one consecutive pair adds (0 or 1 each), from the first and second choices of the earlier token (f0,
// s0) and the later one (f1, s1), -1 for an unavailable or absent choice (top_k 1 passes -1 as second
// choices, so that sharing a top-2 expert is sharing the first choice): both first choices the same; the
// top-2 sets sharing an expert. Without branches (count_range runs it on every token).
struct PairCounts {
  int same_first, same_either;
};
PairCounts pair_counts(int32_t f0, int32_t s0, int32_t f1, int32_t s1) {
  return {bit(f0 >= 0) & bit(f0 == f1), (bit(f0 >= 0) & (bit(f0 == f1) | bit(f0 == s1))) |
                                            (bit(s0 >= 0) & (bit(s0 == f1) | bit(s0 == s1)))};
}

}  // namespace

RoutingStatsCounter::RoutingStatsCounter(int num_experts, int top_k)
    : num_experts_(num_experts), top_k_(top_k), counts_(make_counts()) {}

RoutingStatsCounts RoutingStatsCounter::make_counts() const {
  RoutingStatsCounts c;
  c.choices.assign(num_experts_, 0);
  return c;
}

RoutingStatsCounter::Last RoutingStatsCounter::token(std::span<const TokenMeta> rows,
                                                     const TokenRoutes& routes, int64_t t) const {
  return Last{rows[t].position, routes.expert(t, 0), top_k_ >= 2 ? routes.expert(t, 1) : -1};
}

void RoutingStatsCounter::pair(const Last& prev, const Last& next, RoutingStatsCounts& counts) const {
  const PairCounts p = pair_counts(prev.first, prev.second, next.first, next.second);
  ++counts.consecutive;
  counts.same_first += p.same_first;
  counts.same_either += p.same_either;
}

void RoutingStatsCounter::count_range(std::span<const TokenMeta> rows, const TokenRoutes& routes,
                                      int64_t first, int64_t count, RoutingStatsCounts& counts) const {
  // pair()'s counts on raw rows of routes (this loop sees every token of the workload).
  const int k = top_k_, R = routes.num_ranked;
  // Choices into kCopies histograms by row, so that increments of one expert by neighbouring rows do not wait
  // on each other's stores (a range holds fewer than 2^31 rows).
  constexpr int kCopies = 4, kMaxLocal = 256;
  int32_t local[kCopies * kMaxLocal];
  const bool use_local = num_experts_ <= kMaxLocal;
  if (use_local) std::fill(local, local + kCopies * num_experts_, 0);
  int64_t consecutive = 0, same_first = 0, same_either = 0;
  const int32_t* cur = routes.experts.data() + first * R;
  for (int64_t t = first; t < first + count; ++t, cur += R) {
    for (int r = 0; r < k; ++r) {
      const int32_t e = cur[r] >= 0 ? cur[r] : 0, add = cur[r] >= 0 ? 1 : 0;
      if (use_local) {
        local[(t % kCopies) * num_experts_ + e] += add;
      } else {
        counts.choices[e] += add;
      }
    }
    // Without branches on the rows' pattern (prompt runs and decode rows alternate): every row computes the
    // pair with its predecessor in the range (itself for the first), and counts it when it is one.
    const TokenMeta& before = rows[t > first ? t - 1 : t];
    const int linked = bit(t > first) & bit(before.request_id == rows[t].request_id) &
                       bit(before.position + 1 == rows[t].position);
    const int32_t* prev = t > first ? cur - R : cur;
    const PairCounts p = pair_counts(prev[0], k >= 2 ? prev[1] : -1, cur[0], k >= 2 ? cur[1] : -1);
    consecutive += linked;
    same_first += linked & p.same_first;
    same_either += linked & p.same_either;
  }
  if (use_local) {
    for (int c = 0; c < kCopies; ++c) {
      for (int e = 0; e < num_experts_; ++e) counts.choices[e] += local[c * num_experts_ + e];
    }
  }
  counts.consecutive += consecutive;
  counts.same_first += same_first;
  counts.same_either += same_either;
}

void RoutingStatsCounter::link(std::span<const TokenMeta> rows, const TokenRoutes& routes, int64_t range) {
  const int64_t n = static_cast<int64_t>(rows.size());
  // Run by run (a request's consecutive rows): the run's first row pairs with the request's last token of
  // earlier steps or runs, rows that start a range pair with their predecessor in the range before, and the
  // run's last row becomes the request's last token. The rows inside a run are only scanned.
  for (int64_t start = 0; start < n;) {
    const uint64_t id = rows[start].request_id;
    int64_t end = start;
    while (end + 1 < n && rows[end + 1].request_id == id) ++end;
    const Last first = token(rows, routes, start);
    const auto [it, inserted] = last_.try_emplace(id, first);
    Last* last = &it->second;
    if (!inserted && last->position + 1 == first.position) pair(*last, first, counts_);
    for (int64_t t = (start / range + 1) * range; t <= end; t += range) {
      if (rows[t - 1].position + 1 == rows[t].position) {
        pair(token(rows, routes, t - 1), token(rows, routes, t), counts_);
      }
    }
    *last = token(rows, routes, end);
    start = end + 1;
  }
  tokens_ += n;
}

void RoutingStatsCounter::add(std::span<const TokenMeta> rows, const TokenRoutes& routes) {
  const int64_t n = static_cast<int64_t>(rows.size());
  count_range(rows, routes, 0, n, counts_);
  link(rows, routes, std::max<int64_t>(n, 1));
}

void RoutingStatsCounter::merge(const RoutingStatsCounts& counts) {
  for (int e = 0; e < num_experts_; ++e) counts_.choices[e] += counts.choices[e];
  counts_.consecutive += counts.consecutive;
  counts_.same_first += counts.same_first;
  counts_.same_either += counts.same_either;
}

void RoutingStatsCounter::release(uint64_t request_id) {
  last_.erase(request_id);
}

RoutingStats RoutingStatsCounter::result() const {
  RoutingStats s;
  s.tokens = tokens_;
  s.choices = counts_.choices;
  for (int64_t c : s.choices) s.pairs += c;
  if (s.pairs > 0) {
    const auto [lo, hi] = std::minmax_element(s.choices.begin(), s.choices.end());
    s.share_min = static_cast<double>(*lo) / static_cast<double>(s.pairs);
    s.share_max = static_cast<double>(*hi) / static_cast<double>(s.pairs);
    s.load_imbalance = s.share_max * num_experts_;
  }
  s.consecutive = counts_.consecutive;
  if (s.consecutive > 0) {
    s.same_first = static_cast<double>(counts_.same_first) / static_cast<double>(s.consecutive);
    s.same_first_or_second = static_cast<double>(counts_.same_either) / static_cast<double>(s.consecutive);
  }
  return s;
}

}  // namespace moe::sim
