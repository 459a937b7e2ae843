// Statistics of a router's choices before any capacity applies, the ones published for trained routers
// (Mixtral 8x7B, Jiang et al. 2024, section 5 and Table 5; ST-MoE; Switch), so a scenario can be compared
// with a real model.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "router/token_meta.h"
#include "router/token_routes.h"

namespace moe::sim {

struct RoutingStats {
  int64_t tokens = 0;
  int64_t pairs = 0;                    // tokens * top_k choices (an unavailable choice, expert -1, excluded)
  std::vector<int64_t> choices;         // per expert: pairs that chose it (ranks < top_k)
  double share_min = 0, share_max = 0;  // min / max over experts of choices[e] / pairs
  double load_imbalance = 0;            // share_max * num_experts (1 = perfectly even)
  // Consecutive tokens: pairs (request r, position p) and (r, p + 1) both in the workload.
  int64_t consecutive = 0;
  double same_first = 0;            // rank-0 expert the same (random routing: 1 / E)
  double same_first_or_second = 0;  // the two tokens' top-2 sets share an expert (random: 1 -
                                    // C(E-2,2)/C(E,2)); with top_k 1 the same as same_first
};

// The counts of RoutingStats that add up over any split of the tokens: per-expert choices and the
// consecutive pairs with what they share. One per worker when steps are counted in parallel (count_range).
struct RoutingStatsCounts {
  std::vector<int64_t> choices;
  int64_t consecutive = 0, same_first = 0, same_either = 0;
};

// Accumulates RoutingStats over steps given in order: rows[i] is token i of routes (one step's rows and their
// routes). Consecutive tokens are found across steps through each request's last seen token; release(r)
// forgets a finished request.
//
// add(step) is the whole count. Parallel form: count_range over ranges [j * R, min((j + 1) * R, rows)) of a
// step (any threads, each into its own counts; const), then link(step, R) for the steps in order (one
// thread), and merge() of every counts at the end: the same result as add() of each step.
class RoutingStatsCounter {
 public:
  RoutingStatsCounter(int num_experts, int top_k);
  void add(std::span<const TokenMeta> rows, const TokenRoutes& routes);
  void release(uint64_t request_id);
  RoutingStats result() const;

  RoutingStatsCounts make_counts() const;
  // The choices of rows [first, first + count) and the consecutive pairs inside that range.
  void count_range(std::span<const TokenMeta> rows, const TokenRoutes& routes, int64_t first, int64_t count,
                   RoutingStatsCounts& counts) const;
  // The rest of a step whose ranges of `range` rows were counted: pairs across range boundaries and with
  // earlier steps; remembers each request's last token.
  void link(std::span<const TokenMeta> rows, const TokenRoutes& routes, int64_t range);
  void merge(const RoutingStatsCounts& counts);

 private:
  struct Last {
    uint32_t position;
    int32_t first, second;
  };
  Last token(std::span<const TokenMeta> rows, const TokenRoutes& routes, int64_t t) const;
  void pair(const Last& prev, const Last& next, RoutingStatsCounts& counts) const;

  int num_experts_, top_k_;
  int64_t tokens_ = 0;
  RoutingStatsCounts counts_;
  std::unordered_map<uint64_t, Last> last_;  // each live request's last token so far
};

}  // namespace moe::sim
