// A serving engine's handling of one probe request, drawn at random, as a list of operations that every
// backend under test (the CPU planner, the GPU planner's OpenMP twin, the CPU and expert-parallel layers)
// replays on its own RoutingState: strangers arriving, prefilling in chunks and decoding (speculatively too);
// a writer request that shares the probe's first P tokens and whose routing segments a prefix cache keeps;
// the probe restored from those segments, prefilled in chunks, decoding with speculative draft tokens that
// are partly rejected (rolled back), preempted (its segments saved, released, restored from a shorter cached
// prefix, its prompt and generated tokens re-prefilled in chunks), its prompt partly rolled back and re-sent.
// What the probe's positions end up with - through the writer's cached segments, its own recomputations or
// its saved segments - must equal the probe served alone in one call (docs/determinism.md clause 2b).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "router/dispatch_policy.h"
#include "router/routing_state.h"
#include "router/token_meta.h"

namespace moe::testing {

// A row: its identity in the batch and its content - the token it holds, which is what decides its router
// input: (content, position) for a stranger's tokens, the probe's, a shared prefix or a rejected draft token.
struct ServingRow {
  TokenMeta meta;
  uint64_t content = 0;
};

struct ServingOp {
  enum Kind {
    kAdmit,            // state.admit(request, prompt_length)
    kRestore,          // state.restore(request, prompt_length, saved[slot] up to restore_end)
    kRestoreMustFail,  // the same, which must throw and change nothing (a prefix of another salt)
    kForward,          // one forward pass over `rows`
    kRollback,         // state.rollback(request, position)
    kSave,             // saved[slot] = the segments of `request` over `bounds` (a prefix cache's blocks)
    kRelease,          // state.release(request)
  };
  Kind kind = kForward;
  uint64_t request = 0;
  uint32_t prompt_length = 0;
  uint32_t position = 0;
  int slot = 0;
  uint32_t restore_end = 0;
  // kRestore: hand the segments to restore() claiming this request's prompt length (a cache keyed by tokens
  // alone, which ignores prefix_cache_salt) - the counter-check of today's sequence scope.
  bool forge_prompt_length = false;
  std::vector<uint32_t> bounds;  // kSave: 0 < b_1 < ... < b_n, segments [0, b_1), [b_1, b_2), ...
  std::vector<ServingRow> rows;  // kForward

  static ServingOp make(Kind kind, uint64_t request, uint32_t prompt_length = 0, uint32_t position = 0) {
    ServingOp o;
    o.kind = kind;
    o.request = request;
    o.prompt_length = prompt_length;
    o.position = position;
    return o;
  }
};

struct ServingTrial {
  DispatchPolicy policy;
  uint64_t probe = 7;
  uint64_t probe_content = 7;
  uint32_t prompt_length = 0;
  uint32_t total = 0;  // positions the probe ends with (prompt + decode)
  std::vector<ServingOp> ops;
  // What was drawn.
  uint32_t cached = 0;  // positions restored from the writer's segments
  int preemptions = 0;
  int rejected = 0;  // rejected draft rows
  int prompt_rollbacks = 0;
  int forwards = 0;

  std::string describe() const {
    return "prompt " + std::to_string(prompt_length) + ", total " + std::to_string(total) + ", cached " +
           std::to_string(cached) + ", preemptions " + std::to_string(preemptions) + ", rejected drafts " +
           std::to_string(rejected) + ", prompt rollbacks " + std::to_string(prompt_rollbacks) + ", scope " +
           std::string(to_string(policy.scope)) + ", lookahead " + std::to_string(policy.lookahead);
  }
};

// The probe alone: its prompt and decode rows in one call, after admit(probe, prompt_length).
inline std::vector<ServingRow> ProbeAloneRows(const ServingTrial& trial) {
  std::vector<ServingRow> rows;
  for (uint32_t p = 0; p < trial.total; ++p) rows.push_back({{trial.probe, p}, trial.probe_content});
  return rows;
}

struct ServingDrawOptions {
  int max_prompt = 48;
  int max_decode = 8;
  // Counter-check: the writer's prompt length differs where its routing depends on it, and the probe
  // restores its segments anyway, claiming its own prompt length (a cache keyed by tokens alone).
  bool forge = false;
};

namespace serving_detail {

struct Live {
  uint64_t id;
  uint64_t content;   // content of positions >= shared (the request's own tokens)
  uint32_t shared;    // positions [0, shared) hold the probe's content
  uint32_t prompt;    // L
  uint32_t next;      // next position to compute
  uint32_t total;     // positions it ends with
  uint32_t boundary;  // cache boundary (rollbacks may not go below it)
};

class Drawer {
 public:
  Drawer(std::mt19937_64& rng, ServingTrial& trial) : rng_(rng), t_(trial) {}

  uint32_t below(uint32_t n) { return n == 0 ? 0 : static_cast<uint32_t>(rng_() % n); }
  bool chance(int percent) { return static_cast<int>(rng_() % 100) < percent; }

  uint64_t content_at(const Live& l, uint32_t p) const { return p < l.shared ? t_.probe_content : l.content; }

  void op(ServingOp o) { t_.ops.push_back(std::move(o)); }

  // Random block boundaries ending at `end` (> 0).
  std::vector<uint32_t> bounds_to(uint32_t end) {
    std::vector<uint32_t> b;
    for (uint32_t p = 1; p < end; ++p) {
      if (chance(25)) b.push_back(p);
    }
    b.push_back(end);
    return b;
  }

  // One step: strangers arrive and advance; `mine` (the probe's or the writer's rows) join; rows shuffled.
  void step(std::vector<ServingRow> mine) {
    if (chance(50)) {
      const uint32_t prompt = 1 + below(40);
      Live s{next_id_, next_id_, 0, prompt, 0, prompt + below(6), 0};
      ++next_id_;
      op(ServingOp::make(ServingOp::kAdmit, s.id, s.prompt));
      strangers_.push_back(s);
    }
    std::vector<ServingRow> rows = std::move(mine);
    std::vector<ServingOp> after;
    for (Live& s : strangers_) {
      if (s.next < s.prompt) {
        const uint32_t n = std::min(s.prompt - s.next, 1 + below(24));
        for (uint32_t i = 0; i < n; ++i) rows.push_back({{s.id, s.next + i}, s.content});
        s.next += n;
      } else if (chance(30) && s.next + 1 < s.total) {  // a speculative step: some drafts rejected
        const uint32_t d = 1 + below(std::min<uint32_t>(3, s.total - s.next - 1));
        const uint32_t accepted = below(d + 1);
        for (uint32_t i = 0; i <= d; ++i) {
          rows.push_back({{s.id, s.next + i}, i <= accepted ? s.content : draft_content_++});
        }
        if (accepted < d)
          after.push_back(ServingOp::make(ServingOp::kRollback, s.id, 0, s.next + accepted + 1));
        s.next += accepted + 1;
      } else {
        rows.push_back({{s.id, s.next}, s.content});
        ++s.next;
      }
    }
    std::shuffle(rows.begin(), rows.end(), rng_);
    ServingOp forward;
    forward.rows = std::move(rows);
    op(std::move(forward));
    ++t_.forwards;
    for (ServingOp& o : after) op(std::move(o));
    for (size_t i = 0; i < strangers_.size();) {
      if (strangers_[i].next >= strangers_[i].total) {
        op(ServingOp::make(ServingOp::kRelease, strangers_[i].id));
        strangers_.erase(strangers_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }

  // Serves a writer (shares the probe's first `shared` positions) to its end among strangers, saves its
  // segments over bounds ending at `save_end` into `slot`, and releases it.
  void serve_writer(uint32_t prompt, uint32_t total, uint32_t shared, uint32_t save_end, int slot) {
    Live w{next_id_, next_id_, shared, prompt, 0, total, 0};
    ++next_id_;
    op(ServingOp::make(ServingOp::kAdmit, w.id, w.prompt));
    while (w.next < w.total) {
      const uint32_t n = w.next < w.prompt ? std::min(w.prompt - w.next, 1 + below(16)) : 1;
      std::vector<ServingRow> rows;
      for (uint32_t i = 0; i < n; ++i) rows.push_back({{w.id, w.next + i}, content_at(w, w.next + i)});
      w.next += n;
      step(std::move(rows));
    }
    ServingOp save = ServingOp::make(ServingOp::kSave, w.id);
    save.slot = slot;
    save.bounds = bounds_to(save_end);
    op(std::move(save));
    op(ServingOp::make(ServingOp::kRelease, w.id));
  }

  void release_strangers() {
    for (const Live& s : strangers_) op(ServingOp::make(ServingOp::kRelease, s.id));
    strangers_.clear();
  }

 private:
  std::mt19937_64& rng_;
  ServingTrial& t_;
  std::vector<Live> strangers_;
  uint64_t next_id_ = 100;
  uint64_t draft_content_ = 1u << 20;
};

}  // namespace serving_detail

// Draws one trial under `policy` (a recording RoutingState replays it: rollbacks into prompt rows need the
// records).
inline ServingTrial DrawServingTrial(std::mt19937_64& rng, const DispatchPolicy& policy,
                                     const ServingDrawOptions& opt = {}) {
  using serving_detail::Live;
  ServingTrial t;
  t.policy = policy;
  t.prompt_length = 1 + static_cast<uint32_t>(rng() % opt.max_prompt);
  t.total = t.prompt_length + static_cast<uint32_t>(rng() % (opt.max_decode + 1));
  serving_detail::Drawer d(rng, t);
  const uint32_t L = t.prompt_length;
  const RoutingRule rule = RoutingRule::of(policy);
  Live probe{t.probe, t.probe_content, 0, L, 0, t.total, 0};
  // A writer computed the probe's first P positions earlier; the cache kept its segments.
  if (t.total >= 2 && (opt.forge || d.chance(65))) {
    const uint32_t P = 1 + d.below(t.total - 1);
    const bool uncut = prefix_cache_salt(rule, P, L) == 0;
    // A writer whose routing of [0, P) is the probe's: the same salt. Where no decision of [0, P) saw L
    // (salt 0) its prompt is any length >= P + lookahead, else the probe's own.
    uint32_t writer_prompt = L;
    if (uncut && d.chance(70)) {
      const uint32_t least = policy.scope == CapacityScope::kPrefix ? P + policy.lookahead : P;
      writer_prompt = std::max<uint32_t>(1, least + d.below(16));
    }
    if (opt.forge) {  // a prompt length of another salt, restored as if it were the probe's
      writer_prompt = std::max<uint32_t>(P, L + 1 + d.below(24));
    }
    if (!uncut && !opt.forge && d.chance(20)) {
      // A prefix of another salt first: restoring it must fail and change nothing.
      const uint32_t other = L + 1 + d.below(8);
      d.serve_writer(other, std::max(other, P), P, P, 1);
      ServingOp bad = ServingOp::make(ServingOp::kRestoreMustFail, t.probe, L);
      bad.slot = 1;
      bad.restore_end = P;
      d.op(std::move(bad));
    }
    const uint32_t writer_total = std::max<uint32_t>(P, writer_prompt + d.below(3));
    d.serve_writer(writer_prompt, writer_total, P, P, 0);
    ServingOp restore = ServingOp::make(ServingOp::kRestore, t.probe, L);
    restore.slot = 0;
    restore.restore_end = P;
    restore.forge_prompt_length = opt.forge;
    d.op(std::move(restore));
    probe.next = probe.boundary = P;
    t.cached = P;
  } else {
    d.op(ServingOp::make(ServingOp::kAdmit, t.probe, L));
  }
  uint32_t recompute_until = 0;  // re-prefill after a preemption: positions < this arrive in chunks
  int slot = 2;
  while (probe.next < t.total) {
    std::vector<ServingRow> rows;
    std::vector<ServingOp> after;
    const uint32_t chunk_end = std::max(L, recompute_until);
    if (probe.next < chunk_end) {
      const uint32_t n = std::min(chunk_end - probe.next, 1 + d.below(16));
      for (uint32_t i = 0; i < n; ++i) rows.push_back({{t.probe, probe.next + i}, t.probe_content});
      probe.next += n;
      if (d.chance(8) && probe.next <= L) {  // the prompt rolled back partly (to be sent again)
        const uint32_t back = probe.boundary + d.below(probe.next - probe.boundary + 1);
        if (back < probe.next) {
          after.push_back(ServingOp::make(ServingOp::kRollback, t.probe, 0, back));
          probe.next = back;
          ++t.prompt_rollbacks;
        }
      }
    } else if (d.chance(40) && probe.next + 1 < t.total) {  // speculative decoding
      const uint32_t drafts = 1 + d.below(std::min<uint32_t>(4, t.total - probe.next - 1));
      const uint32_t accepted = d.below(drafts + 1);
      for (uint32_t i = 0; i <= drafts; ++i) {
        rows.push_back({{t.probe, probe.next + i}, i <= accepted ? t.probe_content : (1u << 30) + i});
      }
      if (accepted < drafts)
        after.push_back(ServingOp::make(ServingOp::kRollback, t.probe, 0, probe.next + accepted + 1));
      t.rejected += static_cast<int>(drafts - accepted);
      probe.next += accepted + 1;
    } else {
      rows.push_back({{t.probe, probe.next}, t.probe_content});
      ++probe.next;
    }
    d.step(std::move(rows));
    for (ServingOp& o : after) d.op(std::move(o));
    if (probe.next < t.total && probe.next > 0 && t.preemptions < 2 && d.chance(6)) {
      // Recompute preemption: the cache keeps blocks of what the probe computed; it is released and comes
      // back restored from some of them, re-prefilling the rest (decode positions too) in chunks.
      ServingOp save = ServingOp::make(ServingOp::kSave, t.probe);
      save.slot = slot;
      save.bounds = d.bounds_to(probe.next);
      const std::vector<uint32_t> bounds = save.bounds;
      d.op(std::move(save));
      d.op(ServingOp::make(ServingOp::kRelease, t.probe));
      for (uint32_t idle = d.below(3); idle > 0; --idle) d.step({});
      recompute_until = std::max(recompute_until, probe.next);
      const uint32_t keep = d.chance(30) ? 0 : bounds[d.below(static_cast<uint32_t>(bounds.size()))];
      if (keep == 0) {
        d.op(ServingOp::make(ServingOp::kAdmit, t.probe, L));
      } else {
        ServingOp restore = ServingOp::make(ServingOp::kRestore, t.probe, L);
        restore.slot = slot;
        restore.restore_end = keep;
        d.op(std::move(restore));
      }
      probe.next = probe.boundary = keep;
      ++slot;
      ++t.preemptions;
    }
  }
  d.op(ServingOp::make(ServingOp::kRelease, t.probe));
  d.release_strangers();
  return t;
}

// The lifecycle calls of a replay, straight on the state (a backend with collective calls - the
// expert-parallel layer - passes its own).
struct DirectLifecycle {
  void admit(RoutingState& s, uint64_t id, uint32_t prompt_length) { s.admit(id, prompt_length); }
  void restore(RoutingState& s, uint64_t id, uint32_t prompt_length,
               const std::vector<RoutingSegment>& prefix) {
    s.restore(id, prompt_length, prefix);
  }
  void rollback(RoutingState& s, uint64_t id, uint32_t position) { s.rollback(id, position); }
  void release(RoutingState& s, uint64_t id) { s.release(id); }
};

// Replays `trial` on `state` (a recording state of the backend's shape) with the backend's forward pass:
//   forward(rows, state) -> one Outcome per row (its pairs, and whatever else the backend checks)
// and returns the probe's outcome at each of its positions [0, total): the computation its KV comes from at
// the end - its own last one, or the one of the request whose cached segments it restored.
template <class Outcome, class Forward, class Lifecycle = DirectLifecycle>
std::vector<Outcome> ReplayServingTrial(const ServingTrial& trial, RoutingState& state, Forward&& forward,
                                        Lifecycle life = {}) {
  using Key = std::pair<uint64_t, uint32_t>;
  std::map<Key, Outcome> computed;
  std::map<uint64_t, std::vector<Key>> source;  // request -> per position, the computation it uses
  struct Saved {
    std::vector<RoutingSegment> segments;
    std::vector<Key> source;
  };
  std::map<int, Saved> saved;
  auto prefix_of = [&](const ServingOp& o) {
    std::vector<RoutingSegment> prefix;
    for (const RoutingSegment& s : saved.at(o.slot).segments) {
      if (s.end > o.restore_end) break;
      prefix.push_back(s);
      if (o.forge_prompt_length) prefix.back().prompt_length = o.prompt_length;
    }
    return prefix;
  };
  for (const ServingOp& o : trial.ops) {
    switch (o.kind) {
      case ServingOp::kAdmit:
        life.admit(state, o.request, o.prompt_length);
        source[o.request].clear();
        break;
      case ServingOp::kRestore: {
        life.restore(state, o.request, o.prompt_length, prefix_of(o));
        const std::vector<Key>& from = saved.at(o.slot).source;
        source[o.request].assign(from.begin(), from.begin() + o.restore_end);
        break;
      }
      case ServingOp::kRestoreMustFail: {
        const size_t before = state.num_requests();
        bool threw = false;
        try {
          life.restore(state, o.request, o.prompt_length, prefix_of(o));
        } catch (const std::invalid_argument&) {
          threw = true;
        }
        if (!threw || state.num_requests() != before || state.find(o.request) != nullptr) {
          throw std::logic_error("restoring a prefix of another salt did not fail cleanly");
        }
        break;
      }
      case ServingOp::kForward: {
        const std::vector<Outcome> out = forward(o.rows, state);
        for (size_t r = 0; r < o.rows.size(); ++r) {
          const TokenMeta& m = o.rows[r].meta;
          computed[{m.request_id, m.position}] = out[r];
          std::vector<Key>& src = source[m.request_id];
          if (src.size() <= m.position) src.resize(m.position + 1);
          src[m.position] = {m.request_id, m.position};
        }
        break;
      }
      case ServingOp::kRollback:
        life.rollback(state, o.request, o.position);
        source[o.request].resize(o.position);
        break;
      case ServingOp::kSave: {
        Saved s;
        uint32_t begin = 0;
        for (uint32_t end : o.bounds) {
          s.segments.push_back(state.segment(o.request, begin, end));
          begin = end;
        }
        const std::vector<Key>& src = source.at(o.request);
        s.source.assign(src.begin(), src.begin() + begin);
        saved[o.slot] = std::move(s);
        break;
      }
      case ServingOp::kRelease:
        life.release(state, o.request);
        break;
    }
  }
  std::vector<Outcome> probe;
  const std::vector<Key>& src = source.at(trial.probe);
  for (uint32_t p = 0; p < trial.total; ++p) probe.push_back(computed.at(src.at(p)));
  return probe;
}

}  // namespace moe::testing
