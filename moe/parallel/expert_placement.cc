#include "moe/parallel/expert_placement.h"

#include <sstream>
#include <stdexcept>

#include "base/splitmix64.h"

namespace moe::parallel {

ExpertPlacement ExpertPlacement::contiguous(int num_experts, int world_size) {
  if (num_experts < 1) {
    throw std::invalid_argument("ExpertPlacement: num_experts (" + std::to_string(num_experts) +
                                ") must be >= 1");
  }
  if (world_size < 1) {
    throw std::invalid_argument("ExpertPlacement: world_size (" + std::to_string(world_size) +
                                ") must be >= 1");
  }
  std::vector<int> owner(num_experts);
  for (int r = 0; r < world_size; ++r) {
    const int64_t first = static_cast<int64_t>(num_experts) * r / world_size;
    const int64_t last = static_cast<int64_t>(num_experts) * (r + 1) / world_size;
    for (int64_t e = first; e < last; ++e) owner[e] = r;
  }
  return ExpertPlacement(std::move(owner), world_size);
}

ExpertPlacement ExpertPlacement::from_map(std::vector<int> owner_of_expert, int world_size) {
  if (world_size < 1) {
    throw std::invalid_argument("ExpertPlacement: world_size (" + std::to_string(world_size) +
                                ") must be >= 1");
  }
  if (owner_of_expert.empty()) throw std::invalid_argument("ExpertPlacement: the placement map is empty");
  for (size_t e = 0; e < owner_of_expert.size(); ++e) {
    if (owner_of_expert[e] < 0 || owner_of_expert[e] >= world_size) {
      throw std::invalid_argument("ExpertPlacement: expert " + std::to_string(e) + " is placed on rank " +
                                  std::to_string(owner_of_expert[e]) + ", outside [0, " +
                                  std::to_string(world_size) + ")");
    }
  }
  return ExpertPlacement(std::move(owner_of_expert), world_size);
}

std::vector<int> ExpertPlacement::experts_of(int rank) const {
  std::vector<int> out;
  for (int e = 0; e < num_experts(); ++e) {
    if (owner_[e] == rank) out.push_back(e);
  }
  return out;
}

uint64_t ExpertPlacement::hash() const {
  uint64_t h = hash_combine64(0x45505f706c616365ull, static_cast<uint64_t>(world_size_));
  h = hash_combine64(h, owner_.size());
  for (int o : owner_) h = hash_combine64(h, static_cast<uint64_t>(o));
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
  return s.str();
}

}  // namespace moe::parallel
