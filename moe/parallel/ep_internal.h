// Internal to moe/parallel's ExpertParallelLayer (expert_parallel_layer.cc, ep_global_plan.cc,
// ep_home_plan.cc, ep_requests.cc): the helpers its files share.
#pragma once

#include <chrono>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe::parallel::ep_detail {

// A rank's token count in the first exchange of a step (or its outcome in an agreement) when it failed.
inline constexpr size_t kRejected = std::numeric_limits<size_t>::max();

// Routing record of one token, as it travels in kGlobal's metadata all-gather (host byte order; every rank of
// a job is assumed to share it):
//   [0, 8) request_id u64   [8, 12) position u32   [12, 16) top-1 score f32
//   [16, 16 + 4R) ranked experts i32   [16 + 4R, 16 + 8R) weights f32
inline constexpr size_t kRecordHeaderBytes = 16;

[[noreturn]] inline void fail(const std::string& msg) {
  throw std::invalid_argument("expert parallel layer: " + msg);
}

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// "1, 3": the ranks whose value is `flag`.
inline std::string rank_list(std::span<const size_t> values, size_t flag) {
  std::string out;
  for (size_t r = 0; r < values.size(); ++r) {
    if (values[r] == flag) out += (out.empty() ? "" : ", ") + std::to_string(r);
  }
  return out;
}

}  // namespace moe::parallel::ep_detail
