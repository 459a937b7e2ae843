#include "sim/serving/block_pool.h"

#include <stdexcept>
#include <string>

namespace moe::sim::serving {

BlockPool::BlockPool(int64_t num_blocks) {
  if (num_blocks < 1 || num_blocks > INT32_MAX) {
    throw std::invalid_argument("block pool: num_blocks must be in [1, 2^31) (got " +
                                std::to_string(num_blocks) + ")");
  }
  refs_.assign(num_blocks, 0);
  key_.assign(num_blocks, BlockKey{});
  registered_.assign(num_blocks, 0);
  lru_pos_.resize(num_blocks);
  free_.reserve(num_blocks);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));  // 0 first
}

int BlockPool::match(std::span<const BlockKey> keys, std::vector<int32_t>& out) {
  int n = 0;
  for (const BlockKey& k : keys) {
    auto it = block_of_.find(k);
    if (it == block_of_.end()) break;
    const int32_t b = it->second;
    if (refs_[b]++ == 0) evictable_.erase(lru_pos_[b]);
    out.push_back(b);
    ++n;
  }
  return n;
}

bool BlockPool::allocate(int64_t n, std::vector<int32_t>& out) {
  if (n <= 0) return true;
  if (available() < n) return false;
  for (int64_t i = 0; i < n; ++i) {
    int32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      b = evictable_.front();
      evictable_.pop_front();
      block_of_.erase(key_[b]);
      registered_[b] = 0;
      ++evictions_;
    }
    refs_[b] = 1;
    out.push_back(b);
  }
  return true;
}

bool BlockPool::register_block(int32_t block, const BlockKey& key) {
  if (registered_[block]) return key_[block] == key;
  if (!block_of_.emplace(key, block).second) return false;
  registered_[block] = 1;
  key_[block] = key;
  return true;
}

void BlockPool::release(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    if (refs_[b] <= 0) throw std::logic_error("block pool: block " + std::to_string(b) + " released twice");
    if (--refs_[b] > 0) continue;
    if (registered_[b]) {
      lru_pos_[b] = evictable_.insert(evictable_.end(), b);
    } else {
      free_.push_back(b);
    }
  }
}

}  // namespace moe::sim::serving
