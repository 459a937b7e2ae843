// The KV-block pool of the serving engine, with a prefix cache in the style of vLLM's automatic prefix
// caching: a fixed number of blocks; a request holds the blocks of its positions (shared blocks are
// reference-counted); a block whose positions are all computed may be registered under the key of its prefix
// (BlockKey, sim/serving/block_key.h: a SHA-256 chain over its and every earlier block's positions, tokens
// and key extension), and stays findable after its last holder lets go, until it is evicted (least recently
// released first) to make room.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "sim/serving/block_key.h"

namespace moe::sim::serving {

class BlockPool {
 public:
  // `num_blocks` blocks (>= 1). Block ids are 0 .. num_blocks - 1.
  explicit BlockPool(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(refs_.size()); }
  // Blocks that allocate() can hand out now: free ones and cached ones no request holds.
  int64_t available() const { return static_cast<int64_t>(free_.size() + evictable_.size()); }

  // The longest run of registered blocks whose keys are keys[0], keys[1], ...: their ids are appended to
  // `out` and each gains a holder. Returns the run's length.
  int match(std::span<const BlockKey> keys, std::vector<int32_t>& out);
  // Appends `n` blocks to `out` (free ones first, then the least recently released cached ones, which leave
  // the cache), each with one holder; false (nothing taken) when fewer than n are available.
  bool allocate(int64_t n, std::vector<int32_t>& out);
  // Registers a held block under `key`: false (nothing changes) when another block already holds that key
  // (or this block another key).
  bool register_block(int32_t block, const BlockKey& key);
  // Drops one holder of each block, in order; a registered block no one holds stays cached (evictable),
  // another becomes free.
  void release(std::span<const int32_t> blocks);

  int64_t cached() const { return static_cast<int64_t>(block_of_.size()); }
  int64_t evictions() const { return evictions_; }

 private:
  std::vector<int32_t> refs_;
  std::vector<BlockKey> key_;  // per block: its registered key (valid when registered_[b])
  std::vector<uint8_t> registered_;
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::vector<int32_t> free_;
  std::list<int32_t> evictable_;  // least recently released first
  std::unordered_map<BlockKey, int32_t, BlockKeyHash> block_of_;
  int64_t evictions_ = 0;
};

}  // namespace moe::sim::serving
