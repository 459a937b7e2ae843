// The KV-block pool of the serving engine, with a prefix cache in the style of vLLM's automatic prefix
// caching: a fixed number of blocks; a request holds the blocks of its positions (shared blocks are
// reference-counted); a block whose positions are all computed may be registered under the hash of its prefix
// (the chain of its and every earlier block's tokens and key extension), and stays findable after its last
// holder lets go, until it is evicted (least recently released first) to make room.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace moe::sim::serving {

class BlockPool {
 public:
  // `num_blocks` blocks (>= 1). Block ids are 0 .. num_blocks - 1.
  explicit BlockPool(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(refs_.size()); }
  // Blocks that allocate() can hand out now: free ones and cached ones no request holds.
  int64_t available() const { return static_cast<int64_t>(free_.size() + evictable_.size()); }

  // The longest run of registered blocks whose hashes are hashes[0], hashes[1], ...: their ids are appended
  // to `out` and each gains a holder. Returns the run's length.
  int match(std::span<const uint64_t> hashes, std::vector<int32_t>& out);
  // Appends `n` blocks to `out` (free ones first, then the least recently released cached ones, which leave
  // the cache), each with one holder; false (nothing taken) when fewer than n are available.
  bool allocate(int64_t n, std::vector<int32_t>& out);
  // Registers a held block under `hash`: false (nothing changes) when another block already holds that hash.
  bool register_block(int32_t block, uint64_t hash);
  // Drops one holder of each block, in order; a registered block no one holds stays cached (evictable),
  // another becomes free.
  void release(std::span<const int32_t> blocks);

  int64_t cached() const { return static_cast<int64_t>(block_of_.size()); }
  int64_t evictions() const { return evictions_; }

 private:
  std::vector<int32_t> refs_;
  std::vector<uint64_t> hash_;  // per block: its registered hash (valid when registered_[b])
  std::vector<uint8_t> registered_;
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::vector<int32_t> free_;
  std::list<int32_t> evictable_;  // least recently released first
  std::unordered_map<uint64_t, int32_t> block_of_;
  int64_t evictions_ = 0;
};

}  // namespace moe::sim::serving
