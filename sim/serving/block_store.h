// What an engine's client keeps beside the prefix cache's blocks - their payload: KV, routing segments -, and
// the one check of a restore. Each payload is kept tagged with the key the engine registered its block under
// and the positions it holds (sim/serving/engine.h, Registered). take() hands an admission's payloads over
// only when they are exactly its cached positions: block i holds [i * block_size, (i + 1) * block_size), the
// blocks end at admission.cached, and each was kept under the key the engine matched for it. A payload kept
// for another prefix (a stale slot, a forged or colliding key, a client bug) is refused with a named
// std::invalid_argument instead of being served. What the payload itself holds (the routing segments' rule,
// shape, salt, positions) its consumer checks in turn (moe::model::Model::admit_cached, RoutingState::
// restore).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/serving/block_key.h"
#include "sim/serving/engine.h"

namespace moe::sim::serving {

// What the store knows of one block's payload.
struct BlockTag {
  bool kept = false;
  BlockKey key;
  uint32_t begin = 0, end = 0;
};

// The check of take(): throws std::invalid_argument naming the request, the block and what differs, when
// `tags` (one per admission.blocks entry, in order) are not admission's cached positions under its keys.
void check_restored_blocks(const Admission& admission, const std::vector<const BlockTag*>& tags);

template <typename Payload>
class BlockStore {
 public:
  // A store for a pool of `num_blocks` blocks (0: none; keep() and take() then refuse every block).
  explicit BlockStore(int64_t num_blocks = 0) : entries_(static_cast<size_t>(num_blocks)) {}

  // The cache holds `block` now: keep `payload` for its positions, under its key.
  void keep(const Registered& block, Payload payload) {
    Entry& e = entry(block.block);
    e.tag = BlockTag{true, block.key, block.begin, block.end};
    e.payload = std::move(payload);
  }
  // The payloads of admission.blocks in order (into `out`, cleared first), after check_restored_blocks.
  void take(const Admission& admission, std::vector<const Payload*>& out) {
    tags_.clear();
    out.clear();
    for (int32_t b : admission.blocks) {
      const Entry& e = entry(b);
      tags_.push_back(&e.tag);
      out.push_back(&e.payload);
    }
    check_restored_blocks(admission, tags_);
  }
  // The entry of a block, for a test that forges one.
  Payload& payload(int32_t block) { return entry(block).payload; }
  BlockTag& tag(int32_t block) { return entry(block).tag; }

 private:
  struct Entry {
    BlockTag tag;
    Payload payload{};
  };
  Entry& entry(int32_t block) {
    if (block < 0 || static_cast<size_t>(block) >= entries_.size()) {
      throw std::invalid_argument("block store: block " + std::to_string(block) + " is outside the pool of " +
                                  std::to_string(entries_.size()) + " blocks");
    }
    return entries_[static_cast<size_t>(block)];
  }
  std::vector<Entry> entries_;
  std::vector<const BlockTag*> tags_;
};

}  // namespace moe::sim::serving
