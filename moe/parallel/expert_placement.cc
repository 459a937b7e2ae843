#include "moe/parallel/expert_placement.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "base/splitmix64.h"

namespace moe::parallel {
namespace {

[[noreturn]] void fail(const std::string& msg) {
  throw std::invalid_argument("ExpertPlacement: " + msg);
}

void check_world(int world_size) {
  if (world_size < 1) fail("world_size (" + std::to_string(world_size) + ") must be >= 1");
}

}  // namespace

ExpertPlacement ExpertPlacement::contiguous(int num_experts, int world_size) {
  if (num_experts < 1) fail("num_experts (" + std::to_string(num_experts) + ") must be >= 1");
  check_world(world_size);
  std::vector<std::vector<int>> replicas(num_experts);
  for (int r = 0; r < world_size; ++r) {
    const int64_t first = static_cast<int64_t>(num_experts) * r / world_size;
    const int64_t last = static_cast<int64_t>(num_experts) * (r + 1) / world_size;
    for (int64_t e = first; e < last; ++e) replicas[e] = {r};
  }
  return ExpertPlacement(std::move(replicas), world_size);
}

ExpertPlacement ExpertPlacement::from_map(std::vector<int> owner_of_expert, int world_size) {
  check_world(world_size);
  if (owner_of_expert.empty()) fail("the placement map is empty");
  std::vector<std::vector<int>> replicas(owner_of_expert.size());
  for (size_t e = 0; e < owner_of_expert.size(); ++e) {
    if (owner_of_expert[e] < 0 || owner_of_expert[e] >= world_size) {
      fail("expert " + std::to_string(e) + " is placed on rank " + std::to_string(owner_of_expert[e]) +
           ", outside [0, " + std::to_string(world_size) + ")");
    }
    replicas[e] = {owner_of_expert[e]};
  }
  return ExpertPlacement(std::move(replicas), world_size);
}

ExpertPlacement ExpertPlacement::from_replicas(std::vector<std::vector<int>> ranks_of_expert,
                                               int world_size) {
  check_world(world_size);
  if (ranks_of_expert.empty()) fail("the placement map is empty");
  for (size_t e = 0; e < ranks_of_expert.size(); ++e) {
    if (ranks_of_expert[e].empty()) fail("expert " + std::to_string(e) + " has no replica");
    for (int r : ranks_of_expert[e]) {
      if (r < 0 || r >= world_size) {
        fail("expert " + std::to_string(e) + " has a replica on rank " + std::to_string(r) +
             ", outside [0, " + std::to_string(world_size) + ")");
      }
    }
  }
  return ExpertPlacement(std::move(ranks_of_expert), world_size);
}

ExpertPlacement ExpertPlacement::from_replication(const ExpertReplication& replication) {
  const int slots = replication.num_replicas();
  if (replication.num_gpus < 1 || slots % replication.num_gpus != 0) {
    fail("the replication's " + std::to_string(slots) + " slots do not split evenly over its " +
         std::to_string(replication.num_gpus) + " GPUs");
  }
  if (replication.logical_to_physical.size() != replication.replica_count.size()) {
    fail("the replication's logical_to_physical and replica_count differ in size");
  }
  std::vector<std::vector<int>> replicas(replication.logical_to_physical.size());
  for (size_t e = 0; e < replicas.size(); ++e) {
    const std::vector<int>& s = replication.logical_to_physical[e];
    if (static_cast<int>(s.size()) != replication.replica_count[e]) {
      fail("expert " + std::to_string(e) + " lists " + std::to_string(s.size()) + " slots but a count of " +
           std::to_string(replication.replica_count[e]));
    }
    for (int slot : s) {
      if (slot < 0 || slot >= slots || replication.physical_to_logical[slot] != static_cast<int>(e)) {
        fail("expert " + std::to_string(e) + " lists slot " + std::to_string(slot) +
             ", which does not hold it");
      }
      replicas[e].push_back(replication.gpu_of_slot(slot));
    }
  }
  return from_replicas(std::move(replicas), replication.num_gpus);
}

std::vector<int> ExpertPlacement::owners() const {
  std::vector<int> out(replicas_.size());
  for (size_t e = 0; e < replicas_.size(); ++e) out[e] = replicas_[e][0];
  return out;
}

int ExpertPlacement::num_physical() const {
  int n = 0;
  for (const std::vector<int>& r : replicas_) n += static_cast<int>(r.size());
  return n;
}

bool ExpertPlacement::holds(int rank, int expert) const {
  const std::vector<int>& r = replicas_[expert];
  return std::find(r.begin(), r.end(), rank) != r.end();
}

std::vector<int> ExpertPlacement::experts_of(int rank) const {
  std::vector<int> out;
  for (int e = 0; e < num_experts(); ++e) {
    if (holds(rank, e)) out.push_back(e);
  }
  return out;
}

std::vector<int64_t> ExpertPlacement::rows_per_rank(std::span<const int64_t> count) const {
  const int E = num_experts();
  if (count.size() != static_cast<size_t>(world_size_) * E) {
    fail("rows_per_rank: " + std::to_string(count.size()) +
         " counts, expected world_size x experts = " + std::to_string(static_cast<int64_t>(world_size_) * E));
  }
  std::vector<int64_t> out(world_size_, 0);
  for (int h = 0; h < world_size_; ++h) {
    for (int e = 0; e < E; ++e) {
      const int64_t c = count[static_cast<size_t>(h) * E + e];
      const int64_t R = num_replicas(e);
      // Replica (h + i) mod R for i < c: every replica gets c / R, the c mod R starting at h mod R one more.
      for (int64_t q = 0; q < R; ++q) {
        const int64_t i = ((q - h) % R + R) % R;  // the first index i with (h + i) mod R == q
        out[replicas_[e][q]] += c > i ? (c - i + R - 1) / R : 0;
      }
    }
  }
  return out;
}

uint64_t ExpertPlacement::hash() const {
  uint64_t h = hash_combine64(0x45505f706c616365ull, static_cast<uint64_t>(world_size_));
  h = hash_combine64(h, replicas_.size());
  for (const std::vector<int>& r : replicas_) h = hash_combine64(h, static_cast<uint64_t>(r[0]));
  if (!has_redundancy()) return h;
  h = hash_combine64(h, 0x7265706c69636173ull);  // "replicas"
  for (const std::vector<int>& r : replicas_) {
    h = hash_combine64(h, r.size());
    for (int rank : r) h = hash_combine64(h, static_cast<uint64_t>(rank));
  }
  return h;
}

std::string ExpertPlacement::describe() const {
  std::ostringstream s;
  for (int r = 0; r < world_size_; ++r) {
    s << (r ? ", " : "") << "rank " << r << ":";
    const std::vector<int> mine = experts_of(r);
    if (mine.empty()) s << " none";
    for (size_t i = 0; i < mine.size();) {
      size_t j = i;
      while (j + 1 < mine.size() && mine[j + 1] == mine[j] + 1) ++j;
      s << (i ? "," : " ") << mine[i];
      if (j > i) s << "-" << mine[j];
      i = j + 1;
    }
  }
  if (has_redundancy()) {
    s << "; replicas:";
    bool first = true;
    for (int e = 0; e < num_experts(); ++e) {
      if (num_replicas(e) == 1) continue;
      s << (first ? " " : ", ") << e << " x" << num_replicas(e) << " (ranks";
      for (size_t i = 0; i < replicas_[e].size(); ++i) s << (i ? ", " : " ") << replicas_[e][i];
      s << ")";
      first = false;
    }
  }
  return s.str();
}

}  // namespace moe::parallel
