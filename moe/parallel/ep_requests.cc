// ExpertParallelLayer's request lifecycle calls (expert_parallel_layer.h): kGlobal applies the union of what
// the ranks pass on every rank; kHome applies each rank's own, after agreeing on the outcome of a dry run.
#include <algorithm>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "moe/parallel/ep_internal.h"
#include "moe/parallel/expert_parallel_layer.h"
#include "router/rules/turn_rules.h"

namespace moe::parallel {

using namespace ep_detail;

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

// The request ids of a call's records.
template <class Records>
std::vector<uint64_t> ids_of(const Records& records) {
  std::vector<uint64_t> ids;
  for (const auto& r : records) ids.push_back(r.request_id);
  return ids;
}

// Every rank's records, in rank order (a collective): each rank writes its own with put(bytes, record), and
// get(bytes, at) reads one back.
template <class Record, class Put, class Get>
std::vector<Record> all_gather_records(Communicator& comm, std::span<const Record> mine, Put put, Get get) {
  std::vector<uint8_t> bytes;
  for (const Record& r : mine) put(bytes, r);
  const std::vector<uint8_t> all = all_gather_bytes(comm, bytes);
  std::vector<Record> records;
  for (size_t at = 0; at < all.size();) records.push_back(get(all, at));
  return records;
}

}  // namespace

template <class Apply>
void ExpertParallelLayer::local_lifecycle(Apply&& apply) {
  std::string error;
  try {
    apply(true);
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  comm_.all_gather_sizes(error.empty() ? 0 : 1, hash_gather_);
  const std::string failing = rank_list(hash_gather_, 1);
  if (!failing.empty()) {
    if (!error.empty()) throw std::invalid_argument(error + " (rank " + std::to_string(comm_.rank()) + ")");
    fail("rank(s) " + failing + " refused the call (see their messages); nothing was applied on any rank");
  }
  apply(false);
}

void ExpertParallelLayer::release_requests(std::span<const uint64_t> finished, RoutingState& state) {
  if (home_) {
    local_lifecycle([&](bool dry) {
      for (uint64_t id : finished) {
        if (dry && state.find(id) == nullptr) {
          fail("release_requests: the routing state does not hold request " + std::to_string(id) +
               "; no request was released");
        }
        if (!dry) state.release_if_held(id);  // a request named twice is released once
      }
    });
    return;
  }
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

namespace {

// A request's turn ends as RoutingState takes them: its own list, or {prompt_length}.
std::span<const uint32_t> turns_of(const uint32_t& prompt_length, const std::vector<uint32_t>& turn_ends) {
  return turn_ends.empty() ? std::span<const uint32_t>(&prompt_length, 1)
                           : std::span<const uint32_t>(turn_ends);
}

// A request's turn ends on the wire of the collective lifecycle calls: their count, then each.
void put_turn_ends(std::vector<uint8_t>& out, const std::vector<uint32_t>& turn_ends) {
  put_pod(out, static_cast<uint64_t>(turn_ends.size()));
  for (uint32_t end : turn_ends) put_pod(out, end);
}

std::vector<uint32_t> get_turn_ends(const std::vector<uint8_t>& in, size_t& at) {
  std::vector<uint32_t> turn_ends(get_pod<uint64_t>(in, at));
  for (uint32_t& end : turn_ends) end = get_pod<uint32_t>(in, at);
  return turn_ends;
}

// The records on the wire. What an admission and a restoration both start with: id, prompt length, turn ends.
template <class Record>
void put_prompt(std::vector<uint8_t>& out, const Record& r) {
  put_pod(out, r.request_id);
  put_pod(out, r.prompt_length);
  put_turn_ends(out, r.turn_ends);
}

template <class Record>
Record get_prompt(const std::vector<uint8_t>& in, size_t& at) {
  Record r;
  r.request_id = get_pod<uint64_t>(in, at);
  r.prompt_length = get_pod<uint32_t>(in, at);
  r.turn_ends = get_turn_ends(in, at);
  return r;
}

// An admission is that alone.
void put_admission(std::vector<uint8_t>& out, const ExpertParallelLayer::Admission& a) {
  put_prompt(out, a);
}

ExpertParallelLayer::Admission get_admission(const std::vector<uint8_t>& in, size_t& at) {
  return get_prompt<ExpertParallelLayer::Admission>(in, at);
}

// A restoration then has the segment count, then each segment's byte length and bytes.
void put_restoration(std::vector<uint8_t>& out, const ExpertParallelLayer::Restoration& r) {
  put_prompt(out, r);
  put_pod(out, static_cast<uint64_t>(r.prefix.size()));
  for (const RoutingSegment& s : r.prefix) {
    const std::vector<uint8_t> bytes = s.serialize();
    put_pod(out, static_cast<uint64_t>(bytes.size()));
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
}

ExpertParallelLayer::Restoration get_restoration(const std::vector<uint8_t>& in, size_t& at) {
  auto r = get_prompt<ExpertParallelLayer::Restoration>(in, at);
  const uint64_t n = get_pod<uint64_t>(in, at);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t len = get_pod<uint64_t>(in, at);
    r.prefix.push_back(RoutingSegment::parse(std::span<const uint8_t>(in.data() + at, len)));
    at += len;
  }
  return r;
}

// A rollback: id, position.
void put_rollback(std::vector<uint8_t>& out, const ExpertParallelLayer::Rollback& r) {
  put_pod(out, r.request_id);
  put_pod(out, r.position);
}

ExpertParallelLayer::Rollback get_rollback(const std::vector<uint8_t>& in, size_t& at) {
  ExpertParallelLayer::Rollback r;
  r.request_id = get_pod<uint64_t>(in, at);
  r.position = get_pod<uint32_t>(in, at);
  return r;
}

// The checks of one admission that RoutingState::admit would make, before any request is admitted.
void check_admission(const ExpertParallelLayer::Admission& a, const RoutingState& state) {
  const std::string who = "admit_requests: request " + std::to_string(a.request_id);
  if (a.prompt_length == 0) fail(who + " has prompt length 0; no request was admitted");
  if (!a.turn_ends.empty()) {
    if (const char* error =
            rules::turn_ends_error(a.turn_ends.data(), static_cast<int64_t>(a.turn_ends.size())))
      fail(who + ": " + error + "; no request was admitted");
    if (a.turn_ends.back() != a.prompt_length) {
      fail(who + ": its last turn end " + std::to_string(a.turn_ends.back()) + " is not its prompt length " +
           std::to_string(a.prompt_length) + "; no request was admitted");
    }
  }
  if (state.find(a.request_id) != nullptr) {
    fail(who + " is already admitted (release it first); no request was admitted");
  }
}

// RoutingState::check_restore of one restoration, and its turn ends against its prompt length.
void check_restoration(const ExpertParallelLayer::Restoration& r, const RoutingState& state) {
  if (r.turn_ends.empty()) {
    state.check_restore(r.request_id, r.prompt_length, r.prefix);
    return;
  }
  if (r.turn_ends.back() != r.prompt_length) {
    fail("restore_requests: request " + std::to_string(r.request_id) + ": its last turn end " +
         std::to_string(r.turn_ends.back()) + " is not its prompt length " + std::to_string(r.prompt_length));
  }
  state.check_restore(r.request_id, r.turn_ends, r.prefix);
}

}  // namespace

void ExpertParallelLayer::admit_requests(std::span<const Admission> admitted, RoutingState& state) {
  if (home_) {
    local_lifecycle([&](bool dry) {
      if (!dry) {
        for (const Admission& a : admitted) state.admit(a.request_id, turns_of(a.prompt_length, a.turn_ends));
        return;
      }
      for (const Admission& a : admitted) check_admission(a, state);
      refuse_duplicates(ids_of(admitted), "admit_requests", "admitted");
    });
    return;
  }
  const std::vector<Admission> requests = all_gather_records(comm_, admitted, put_admission, get_admission);
  for (const Admission& a : requests) check_admission(a, state);
  refuse_duplicates(ids_of(requests), "admit_requests", "admitted");
  for (const Admission& a : requests) state.admit(a.request_id, turns_of(a.prompt_length, a.turn_ends));
}

void ExpertParallelLayer::restore_requests(std::span<const Restoration> restored, RoutingState& state) {
  if (home_) {
    local_lifecycle([&](bool dry) {
      if (dry) refuse_duplicates(ids_of(restored), "restore_requests", "restored");
      for (const Restoration& r : restored) {
        if (dry) {
          check_restoration(r, state);
        } else {
          state.restore(r.request_id, turns_of(r.prompt_length, r.turn_ends), r.prefix);
        }
      }
    });
    return;
  }
  const std::vector<Restoration> requests =
      all_gather_records(comm_, restored, put_restoration, get_restoration);
  refuse_duplicates(ids_of(requests), "restore_requests", "restored");
  for (const Restoration& r : requests) check_restoration(r, state);
  for (const Restoration& r : requests)
    state.restore(r.request_id, turns_of(r.prompt_length, r.turn_ends), r.prefix);
}

void ExpertParallelLayer::rollback_requests(std::span<const Rollback> rollbacks, RoutingState& state) {
  if (home_) {
    local_lifecycle([&](bool dry) {
      if (dry) refuse_duplicates(ids_of(rollbacks), "rollback_requests", "rolled back");
      for (const Rollback& r : rollbacks) {
        if (dry) {
          state.check_rollback(r.request_id, r.position);
        } else {
          state.rollback(r.request_id, r.position);
        }
      }
    });
    return;
  }
  const std::vector<Rollback> requests = all_gather_records(comm_, rollbacks, put_rollback, get_rollback);
  refuse_duplicates(ids_of(requests), "rollback_requests", "rolled back");
  for (const Rollback& r : requests) state.check_rollback(r.request_id, r.position);
  for (const Rollback& r : requests) state.rollback(r.request_id, r.position);
}

}  // namespace moe::parallel
